// The jobs list, live: rows change state in place, a new job that matches the filters
// appears at the top (on the first page), a deleted one goes, and ages tick. A sweep's trials
// are one row of the sweep (the socket's "row" messages refill it; its trials' own "job"
// messages say "in" and add no row), except on the list of one sweep's trials (?sweep=NAME).
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const PC = window.PaddleCloud;
  const { age, utc, fillState, tickPredictions } = PC.jobs;
  const table = document.getElementById("jobs");
  if (!table) return;
  const body = table.tBodies[0];
  const template = document.getElementById("job-row");
  const empty = document.getElementById("jobs-empty");
  const status = document.getElementById("live-status");
  const states = table.dataset.states ? table.dataset.states.split(",") : [];
  const search = table.dataset.q || "";
  const inserts = table.dataset.live === "insert";

  const sweep = table.dataset.sweep || "";
  const sweepTemplate = document.getElementById("sweep-row");
  const rowOf = (name, kind) => body.querySelector(kind
    ? `tr[data-kind="${kind}"][data-name="${CSS.escape(name)}"]`
    : `tr[data-name="${CSS.escape(name)}"]:not([data-kind])`);
  const matches = (job) =>
    (!states.length || states.includes(job.state)) && (!search || job.name.includes(search));
  // A sweep's row is listed when one of its trials matches the filters (jobs.folds).
  const rowMatches = (row) => row.trials.some((t) => t.job && matches({ name: t.job, state: t.state }));

  function fill(row, job) {
    row.dataset.name = job.name;
    const link = row.querySelector('[data-field="link"]');
    link.textContent = job.name;
    const pick = row.querySelector('[data-field="pick"]');
    pick.value = job.name;
    pick.setAttribute("aria-label", `compare ${job.name}`);
    link.href = table.dataset.jobUrl.replace("__name__", encodeURIComponent(job.name));
    fillState(row.querySelector('[data-field="state"]'), job);
    // An elastic job's trainers: how many it holds, and its range ("3 (2–4)").
    row.querySelector('[data-field="trainers"]').textContent = job.trainers_shown || job.trainers;
    row.querySelector('[data-field="pservers"]').textContent = job.pservers;
    const ageCell = row.querySelector('[data-field="age"]');
    ageCell.dateTime = job.created_at;
    ageCell.textContent = age(job.created_at);
    const created = row.querySelector('[data-field="created"]');
    created.dateTime = job.created_at;
    created.textContent = utc(job.created_at);
  }

  function flash(row) {
    row.classList.remove("changed");
    void row.offsetWidth; // restart the animation
    row.classList.add("changed");
  }

  function fillSweep(row, sweep) {
    row.dataset.name = sweep.name;
    const link = row.querySelector('[data-field="link"]');
    link.textContent = sweep.name;
    link.href = `${table.dataset.sweepsUrl}#sweep-${sweep.name}`;
    row.querySelector('[data-field="method"]').textContent = `sweep · ${sweep.method}`;
    const state = row.querySelector('[data-field="state"]');
    state.textContent = sweep.state;
    state.className = `badge state-${sweep.state}`;
    row.querySelector('[data-field="progress"]').textContent = sweep.progress_shown;
    row.querySelector('[data-field="best"]').textContent =
      sweep.best_shown || "no value reported yet";
    const end = sweep.predicted_end || {};
    row.querySelector('[data-field="end"]').textContent = sweep.state !== "running" ? ""
      : end.at ? `ends ~${utc(end.at)} UTC` : `end unknown: ${end.unknown}`;
    row.querySelector('[data-field="count"]').textContent =
      `${sweep.trials.length}/${sweep.trials_total} trials`;
    row.querySelector('[data-field="trials-link"]').href = `?sweep=${encodeURIComponent(sweep.name)}`;
    const list = row.querySelector('[data-field="trial-list"]');
    list.replaceChildren(...sweep.trials.filter((t) => t.job).map((trial) => {
      const item = document.createElement("li");
      item.dataset.trial = trial.job;
      const a = document.createElement("a");
      a.href = table.dataset.jobUrl.replace("__name__", encodeURIComponent(trial.job));
      a.textContent = trial.job;
      const badge = document.createElement("span");
      badge.className = `badge state-${trial.state}`;
      badge.textContent = trial.state;
      const settings = document.createElement("span");
      settings.className = "muted";
      settings.textContent = Object.entries(trial.settings).map(([k, v]) => `${k}=${v}`).join(" ");
      item.append(a, " ", badge, " ", settings);
      if (trial.stopped_early) {
        const why = document.createElement("div");
        why.className = "reason muted";
        why.textContent = trial.stopped_early;
        item.append(why);
      }
      return item;
    }));
    for (const field of ["age", "created"]) {
      const cell = row.querySelector(`[data-field="${field}"]`);
      cell.dateTime = sweep.created_at;
      cell.textContent = field === "age" ? age(sweep.created_at) : utc(sweep.created_at);
    }
  }

  // Refill a row, or add one at the top (on the first page) when it matches the filters
  // (``template`` is then its <template>), and say what changed: ``shownBy(row)``'s text.
  function show(row, template, fillRow, shownBy, said) {
    if (row) {
      const before = shownBy(row);
      fillRow(row);
      if (before !== shownBy(row)) {
        flash(row);
        status.textContent = said(false);
      }
    } else if (inserts && template) {
      row = template.content.firstElementChild.cloneNode(true);
      fillRow(row);
      body.prepend(row);
      flash(row);
      empty.hidden = true;
      table.hidden = false;
      document.getElementById("compare-form").hidden = false;
      status.textContent = said(true);
    }
  }

  function updateSweep(sweep) {
    show(rowOf(sweep.name, "sweep"), rowMatches(sweep) && sweepTemplate,
      (row) => fillSweep(row, sweep),
      (row) => row.querySelector('[data-field="progress"]').textContent,
      (added) => `${added ? "new " : ""}sweep ${sweep.name}: ${sweep.progress_shown}`);
  }

  function update(job, folded) {
    if (sweep ? folded?.name !== sweep : folded) return; // not a row of this list
    show(rowOf(job.name), matches(job) && template, (row) => fill(row, job),
      (row) => row.querySelector('[data-part="label"]').textContent,
      (added) => (added ? `new job ${job.name}: ${job.state}` : `${job.name} is ${job.state}`));
  }

  function remove(name) {
    const row = rowOf(name);
    if (!row) return;
    row.remove();
    empty.hidden = body.rows.length > 0;
    table.hidden = !empty.hidden;
    status.textContent = `${name} was deleted`;
  }

  PC.live("/ws/jobs/", {
    onMessage(message) {
      if (message.type === "job") update(message.job, message.in);
      else if (message.type === "row" && message.row.kind === "sweep" && !sweep) {
        updateSweep(message.row);
      }
      else if (message.type === "job_deleted") remove(message.name);
      else if (message.type === "notification") status.textContent = message.text;
    },
    onRefused(error) { status.textContent = error?.message || "live updates are off"; },
    onStatus(state) {
      table.dataset.connection = state;
      if (state === "reconnecting") status.textContent = "reconnecting for live updates…";
      else if (status.textContent.startsWith("reconnecting")) status.textContent = "";
    },
  });

  // "Open in VisualDL" posts the jobs ticked for Compare at once (their boxes belong to the
  // compare form, a GET: without this script the button asks on a page of its own first).
  const visualdl = document.getElementById("visualdl-form");
  document.getElementById("visualdl-button")?.addEventListener("click", (event) => {
    event.preventDefault();
    visualdl.querySelectorAll('input[name="jobs"]').forEach((input) => input.remove());
    for (const pick of body.querySelectorAll('input[data-field="pick"]:checked')) {
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = "jobs";
      input.value = pick.value;
      visualdl.append(input);
    }
    visualdl.submit();
  });

  setInterval(() => {
    const now = Date.now();
    for (const cell of body.querySelectorAll('time[data-field="age"]')) {
      if (cell.dateTime) cell.textContent = age(cell.dateTime, now);
    }
    tickPredictions(body, now);
  }, 1000);
});
