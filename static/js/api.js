// The dashboard's way to reach the portal: the JSON API with the session cookie, the CSRF
// token and the datacenter chosen in the header; WebSocket URLs; and what to do when the
// session has expired (back to the login page, then back here).
//
// Also the small enhancements every page shares: the header's datacenter switch submits on
// change, forms marked data-confirm="…" ask in a dialog first, and buttons marked
// data-copy="#id" copy that element's text.
"use strict";

(function () {
  const csrfToken = () => document.querySelector('meta[name="csrf-token"]')?.content || "";
  const datacenter = () => document.body.dataset.datacenter || "";

  class ApiError extends Error {
    // body: {"code", "message", "fields": {field: message}} (see kernel/errors.py)
    constructor(status, body) {
      super(body.message || `HTTP ${status}`);
      this.status = status;
      this.code = body.code || "";
      this.fields = body.fields || {};
    }
  }

  function loginAgain() {
    const next = location.pathname + location.search + location.hash;
    location.assign(`/login/?next=${encodeURIComponent(next)}`);
  }

  function headers(extra = {}, method = "GET") {
    const h = { Accept: "application/json", ...extra };
    if (datacenter()) h["X-Paddle-Datacenter"] = datacenter();
    if (!["GET", "HEAD"].includes(method)) h["X-CSRFToken"] = csrfToken();
    return h;
  }

  // fetch() a path of the API; JSON in and out. Rejects with ApiError on 4xx/5xx.
  async function api(path, { method = "GET", body, raw = false } = {}) {
    const extra = {};
    let payload = body;
    if (body !== undefined && !(body instanceof Blob) && typeof body !== "string") {
      extra["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
    const response = await fetch(path, {
      method, body: payload, headers: headers(extra, method), credentials: "same-origin",
    });
    if (response.status === 401) { loginAgain(); throw new ApiError(401, {}); }
    if (!response.ok) {
      let data = {};
      try { data = await response.json(); } catch (_) { /* not JSON: keep the status */ }
      throw new ApiError(response.status, data);
    }
    if (raw) return response;
    return response.status === 204 ? null : response.json();
  }

  const wsUrl = (path) =>
    `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;

  // Close codes the portal's WebSockets use (jobs/consumers.py).
  const WS_CLOSE = { NOT_LOGGED_IN: 4401, NOT_FOUND: 4404, BAD_REQUEST: 4400 };

  // -- confirmation dialog --------------------------------------------------------------------

  function element(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value; else node.setAttribute(key, value);
    }
    node.append(...children);
    return node;
  }

  // Ask in a modal dialog; resolves true when confirmed. (What the server checks anyway:
  // without JavaScript, it answers such a form with a confirmation page of its own.)
  function confirmAction(message, { title = "Are you sure?", button = "Confirm",
                                    danger = true } = {}) {
    const ok = element("button", { type: "button", class: danger ? "btn-danger" : "",
                                   value: "ok" }, button);
    const cancel = element("button", { type: "button", class: "btn-secondary" }, "Cancel");
    const dialog = element("dialog", { "aria-labelledby": "confirm-title", class: "confirm" },
      element("div", { class: "dialog-body" },
        element("h2", { id: "confirm-title" }, title), element("p", {}, message)),
      element("div", { class: "dialog-actions" }, cancel, ok));
    document.body.append(dialog);
    return new Promise((resolve) => {
      let answer = false;
      ok.addEventListener("click", () => { answer = true; dialog.close(); });
      cancel.addEventListener("click", () => dialog.close());
      dialog.addEventListener("close", () => { dialog.remove(); resolve(answer); });
      dialog.showModal();
      cancel.focus();
    });
  }

  function enhanceConfirmForms(root) {
    for (const form of root.querySelectorAll("form[data-confirm]")) {
      if (form.dataset.confirmReady) continue;
      form.dataset.confirmReady = "1";
      form.addEventListener("submit", async (event) => {
        if (form.querySelector('input[name="confirm"]')) return;
        event.preventDefault();
        const yes = await confirmAction(form.dataset.confirm, {
          title: form.dataset.confirmTitle || "Are you sure?",
          button: form.dataset.confirmButton || "Confirm",
        });
        if (!yes) return;
        form.append(element("input", { type: "hidden", name: "confirm", value: "yes" }));
        form.submit();
      });
    }
  }

  // -- copy buttons ---------------------------------------------------------------------------

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch (_) { /* no clipboard permission: select and copy the old way */ }
    const area = element("textarea", { readonly: "", class: "visually-hidden" });
    area.value = text;
    document.body.append(area);
    area.select();
    let done = false;
    try { done = document.execCommand("copy"); } catch (_) { done = false; }
    area.remove();
    return done;
  }

  function enhanceCopyButtons(root) {
    for (const button of root.querySelectorAll("button[data-copy]")) {
      button.hidden = false;
      button.addEventListener("click", async () => {
        const source = document.querySelector(button.dataset.copy);
        const done = await copyText(source ? source.textContent : "");
        const label = button.textContent;
        button.textContent = done ? "Copied" : "Select and copy";
        setTimeout(() => { button.textContent = label; }, 1500);
      });
    }
  }

  function enhance(root = document) {
    enhanceConfirmForms(root);
    enhanceCopyButtons(root);
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const select of document.querySelectorAll("select[data-autosubmit]")) {
      select.addEventListener("change", () => select.form.requestSubmit());
    }
    enhance(document);
  });

  window.PaddleCloud = { api, ApiError, headers, csrfToken, datacenter, loginAgain, wsUrl,
    WS_CLOSE, confirm: confirmAction, copyText, enhance, element };
})();
