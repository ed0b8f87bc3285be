// The job page's terminal: a shell (bash, else sh) in a running worker, drawn by xterm.js
// (static/vendor/xterm, loaded when it is first opened), over the exec WebSocket
// (interactive/exec_consumer.py): binary frames both ways (the portal's led by a channel byte),
// a JSON start message with the terminal's size, its resizes, and the exit status at the end.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const PC = window.PaddleCloud;
  const card = document.getElementById("terminal-card");
  if (!card) return;
  const byId = (id) => document.getElementById(id);
  const pane = byId("terminal");
  const status = byId("terminal-status");
  const openButton = byId("terminal-open");
  const closeButton = byId("terminal-close");
  const SHELL = ["sh", "-c", "if command -v bash >/dev/null; then exec bash; fi; exec sh"];
  let socket = null;
  let term = null;
  let loading = null;

  function xterm() {
    if (window.Terminal) return Promise.resolve(window.Terminal);
    if (!loading) {
      loading = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = card.dataset.xterm;
        script.addEventListener("load", () => resolve(window.Terminal));
        script.addEventListener("error", () => reject(new Error("xterm.js did not load")));
        document.head.append(script);
      });
    }
    return loading;
  }

  function say(text) { status.textContent = text; }

  function size() {
    // Columns that fit the pane (a cell of a 14px monospace font is about 8.4px wide).
    const cols = Math.max(40, Math.min(240, Math.floor((pane.clientWidth - 8) / 8.5)));
    return { cols, rows: 24 };
  }

  function ended(text) {
    say(text);
    socket = null;
    openButton.hidden = false;
    closeButton.hidden = true;
    byId("terminal-worker").disabled = false;
  }

  async function open() {
    const worker = byId("terminal-worker").value;
    let Terminal;
    try {
      Terminal = await xterm();
    } catch (error) {
      say(error.message);
      return;
    }
    pane.hidden = false;
    if (!term) {
      term = new Terminal({ ...size(), fontFamily: "monospace", fontSize: 14, lineHeight: 1.2 });
      term.open(pane);
      term.onData((text) => {
        if (socket && socket.readyState === WebSocket.OPEN) {
          socket.send(new TextEncoder().encode(text));
        }
      });
    } else {
      term.reset();
    }
    const search = new URLSearchParams({ worker });
    if (PC.datacenter()) search.set("datacenter", PC.datacenter());
    socket = new WebSocket(PC.wsUrl(`${card.dataset.execUrl}?${search}`));
    socket.binaryType = "arraybuffer";
    openButton.hidden = true;
    closeButton.hidden = false;
    byId("terminal-worker").disabled = true;
    say(`Connecting to ${worker}…`);
    let refused = null;
    const mine = socket;
    socket.addEventListener("open", () => {
      mine.send(JSON.stringify({ type: "start", command: SHELL, tty: true,
                                 cols: term.cols, rows: term.rows, term: "xterm-256color" }));
    });
    socket.addEventListener("message", (event) => {
      if (typeof event.data !== "string") {
        term.write(new Uint8Array(event.data, 1));  // after its channel byte
        return;
      }
      let message;
      try { message = JSON.parse(event.data); } catch (_) { return; }
      if (message.type === "started") {
        say(`A shell in ${message.worker}, as the worker runs.`);
        term.focus();
      } else if (message.type === "exit") {
        refused = `The shell in ${worker} ended (exit ${message.code}).`;
      } else if (message.type === "error") {
        refused = message.message;
      }
    });
    socket.addEventListener("close", (event) => {
      if (mine !== socket) return;
      if (event.code === PC.WS_CLOSE.NOT_LOGGED_IN) PC.loginAgain();
      ended(refused || (event.code === 1000 ? "Closed." : `The connection was lost (${event.code}).`));
    });
  }

  openButton.addEventListener("click", open);
  closeButton.addEventListener("click", () => {
    if (socket) socket.close(1000);
  });
  window.addEventListener("resize", () => {
    if (!term || !socket) return;
    const { cols, rows } = size();
    if (cols === term.cols) return;
    term.resize(cols, rows);
    if (socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "resize", cols, rows }));
    }
  });
});
