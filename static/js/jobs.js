// The jobs list, live: rows change state in place, a new job that matches the filters
// appears at the top (on the first page), a deleted one goes, and ages tick.
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

  const rowOf = (name) => body.querySelector(`tr[data-name="${CSS.escape(name)}"]`);
  const matches = (job) =>
    (!states.length || states.includes(job.state)) && (!search || job.name.includes(search));

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

  function update(job) {
    let row = rowOf(job.name);
    if (row) {
      const before = row.querySelector('[data-part="label"]').textContent;
      fill(row, job);
      if (before !== job.state) {
        flash(row);
        status.textContent = `${job.name} is ${job.state}`;
      }
    } else if (inserts && matches(job)) {
      row = template.content.firstElementChild.cloneNode(true);
      fill(row, job);
      body.prepend(row);
      flash(row);
      empty.hidden = true;
      table.hidden = false;
      document.getElementById("compare-form").hidden = false;
      status.textContent = `new job ${job.name}: ${job.state}`;
    }
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
      if (message.type === "job") update(message.job);
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

  setInterval(() => {
    const now = Date.now();
    for (const cell of body.querySelectorAll('time[data-field="age"]')) {
      if (cell.dateTime) cell.textContent = age(cell.dateTime, now);
    }
    tickPredictions(body, now);
  }, 1000);
});
