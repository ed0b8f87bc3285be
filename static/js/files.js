// The files page's uploads: files chosen with the file input or dropped anywhere on the page
// go, one after the other, straight to the API's byte endpoints (pfs/transfer.py), each with
// its own progress bar; the listing is fetched again afterwards.
//
// As paddlectl does: a file up to data-single-max bytes goes in one PUT to
// /api/v1/pfs/content with its SHA-256; a larger one as a resumable upload (POST
// /api/v1/pfs/uploads, then PATCH chunks, the SHA-256 with the last). The server checks the
// path, the name, the quota and "already exists" before it takes any byte.
"use strict";

(function () {
  const { api, ApiError, headers, loginAgain, enhance, element } = window.PaddleCloud;
  const CONTENT = "/api/v1/pfs/content";
  const UPLOADS = "/api/v1/pfs/uploads";
  const READ = 4 << 20; // bytes hashed at a time

  // -- SHA-256 (FIPS 180-4), fed piece by piece: crypto.subtle digests only whole buffers and
  // exists only in secure contexts. ------------------------------------------------------------

  const K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);
  const ror = (x, n) => (x >>> n) | (x << (32 - n));

  class Sha256 {
    constructor() {
      this.state = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
      this.w = new Uint32Array(64);
      this.pending = new Uint8Array(64);
      this.pendingLength = 0;
      this.length = 0; // bytes fed so far
    }

    update(bytes) {
      this.length += bytes.length;
      let i = 0;
      if (this.pendingLength) {
        i = Math.min(64 - this.pendingLength, bytes.length);
        this.pending.set(bytes.subarray(0, i), this.pendingLength);
        this.pendingLength += i;
        if (this.pendingLength < 64) return this;
        this.block(this.pending, 0);
        this.pendingLength = 0;
      }
      for (; i + 64 <= bytes.length; i += 64) this.block(bytes, i);
      this.pending.set(bytes.subarray(i));
      this.pendingLength = bytes.length - i;
      return this;
    }

    block(bytes, at) {
      const w = this.w;
      for (let t = 0; t < 16; t++) {
        const j = at + 4 * t;
        w[t] = (bytes[j] << 24) | (bytes[j + 1] << 16) | (bytes[j + 2] << 8) | bytes[j + 3];
      }
      for (let t = 16; t < 64; t++) {
        const x = w[t - 15], y = w[t - 2];
        const s0 = ror(x, 7) ^ ror(x, 18) ^ (x >>> 3);
        const s1 = ror(y, 17) ^ ror(y, 19) ^ (y >>> 10);
        w[t] = (w[t - 16] + s0 + w[t - 7] + s1) | 0;
      }
      let [a, b, c, d, e, f, g, h] = this.state;
      for (let t = 0; t < 64; t++) {
        const t1 = (h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g))
                    + K[t] + w[t]) | 0;
        const t2 = ((ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
        h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
      }
      const s = this.state;
      s[0] += a; s[1] += b; s[2] += c; s[3] += d; s[4] += e; s[5] += f; s[6] += g; s[7] += h;
    }

    hex() {
      const bits = this.length * 8;
      const tail = new Uint8Array((this.pendingLength < 56 ? 64 : 128) - this.pendingLength);
      tail[0] = 0x80;
      const view = new DataView(tail.buffer);
      view.setUint32(tail.length - 8, Math.floor(bits / 2 ** 32));
      view.setUint32(tail.length - 4, bits >>> 0);
      this.update(tail);
      return Array.from(this.state, (word) => word.toString(16).padStart(8, "0")).join("");
    }
  }

  async function sha256Of(blob, onProgress) {
    const hash = new Sha256();
    for (let at = 0; at < blob.size; at += READ) {
      hash.update(new Uint8Array(await blob.slice(at, at + READ).arrayBuffer()));
      onProgress(Math.min(at + READ, blob.size) / blob.size);
    }
    return hash.hex();
  }

  // -- one request with upload progress (fetch() reports none) --------------------------------

  function send(method, url, body, extra, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open(method, url);
      for (const [name, value] of Object.entries(headers(extra, method))) {
        xhr.setRequestHeader(name, value);
      }
      xhr.upload.addEventListener("progress", (event) => onProgress(event.loaded));
      xhr.addEventListener("load", () => {
        let data = {};
        try { data = JSON.parse(xhr.responseText || "{}"); } catch (_) { /* not JSON */ }
        if (xhr.status >= 200 && xhr.status < 300) resolve(data);
        else reject(new ApiError(xhr.status, data));
      });
      xhr.addEventListener("error", () => reject(new ApiError(0, {
        message: "the connection to the portal was lost; try again" })));
      xhr.send(body);
    });
  }

  const OCTETS = { "Content-Type": "application/octet-stream" };

  async function putWhole(file, path, overwrite, row) {
    row.status("Checking…");
    const sha256 = await sha256Of(file, () => {});
    const query = new URLSearchParams({ path, overwrite: overwrite ? "1" : "0" });
    await send("PUT", `${CONTENT}?${query}`, file, { ...OCTETS, "X-Checksum-Sha256": sha256 },
      (loaded) => row.progress(loaded / Math.max(file.size, 1)));
  }

  async function sendChunked(file, path, overwrite, row) {
    row.status("Starting…");
    const upload = await api(UPLOADS, { method: "POST",
      body: { path, size: file.size, overwrite, kind: "file" } });
    const hash = new Sha256();
    try {
      for (let at = 0; at < file.size; at += upload.chunk_size) {
        const end = Math.min(at + upload.chunk_size, file.size);
        const bytes = new Uint8Array(await file.slice(at, end).arrayBuffer());
        hash.update(bytes);
        const extra = { ...OCTETS, "Upload-Offset": String(at) };
        if (end === file.size) extra["X-Checksum-Sha256"] = hash.hex();
        await send("PATCH", `${UPLOADS}/${upload.id}`, bytes, extra,
          (loaded) => row.progress((at + loaded) / file.size));
      }
    } catch (error) {
      if (error.status !== 401) {
        api(`${UPLOADS}/${upload.id}`, { method: "DELETE" }).catch(() => {});
      }
      throw error;
    }
  }

  // -- the page -------------------------------------------------------------------------------

  function uploadRow(list, file) {
    const bar = element("div", { class: "bar", role: "progressbar", "aria-valuemin": "0",
      "aria-valuemax": "100", "aria-valuenow": "0", "aria-label": `Uploading ${file.name}` },
      element("span"));
    const status = element("span", { class: "status" }, "Waiting");
    const message = element("div", { class: "message", hidden: "" });
    const item = element("li", { class: "upload-item", "data-name": file.name },
      element("span", { class: "name", title: file.name }, file.name), bar, status, message);
    list.append(item);
    return {
      status(text) { status.textContent = text; },
      progress(fraction) {
        const percent = Math.min(100, Math.round(fraction * 100));
        bar.firstChild.style.width = `${percent}%`;
        bar.setAttribute("aria-valuenow", String(percent));
        status.textContent = `${percent}%`;
      },
      done() {
        this.progress(1);
        item.className = "upload-item done";
        bar.classList.add("done");
        status.textContent = "Uploaded";
        message.hidden = true;
      },
      failed(text, retry) {
        item.className = "upload-item failed";
        bar.classList.add("failed");
        status.textContent = "Failed";
        message.replaceChildren(element("span", { class: "error", role: "alert" }, text));
        if (retry) {
          const again = element("button", { type: "button", class: "btn-secondary btn-sm" },
            "Replace it");
          again.addEventListener("click", () => { message.hidden = true; retry(); });
          message.append(" ", again);
        }
        message.hidden = false;
      },
    };
  }

  function start(zone) {
    const dir = zone.dataset.dir;
    const singleMax = Number(zone.dataset.singleMax);
    const list = document.getElementById("uploads");
    let queue = Promise.resolve();

    async function refreshListing() {
      // The page shown stays (a large folder is listed a page at a time).
      const shown = new URLSearchParams(location.search).get("page") || "1";
      const url = `${location.pathname}?${new URLSearchParams({ path: dir, page: shown })}`;
      const response = await fetch(url, { credentials: "same-origin" });
      if (response.redirected && new URL(response.url).pathname.startsWith("/login/")) {
        loginAgain();
        return;
      }
      if (!response.ok) return; // keep what is shown
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("listing");
      if (fresh) {
        document.getElementById("listing").replaceWith(fresh);
        enhance(fresh);
      }
    }

    async function upload(file, row, overwrite) {
      const path = `${dir}/${file.name}`;
      try {
        if (file.size <= singleMax) await putWhole(file, path, overwrite, row);
        else await sendChunked(file, path, overwrite, row);
      } catch (error) {
        if (error.status === 401) { loginAgain(); return false; }
        const replace = error.code === "exists" && !overwrite
          ? () => { queue = queue.then(() => upload(file, row, true)).then(refreshListing); }
          : null;
        row.failed(error.message, replace);
        return false;
      }
      row.done();
      return true;
    }

    function enqueue(files) {
      const rows = files.map((file) => [file, uploadRow(list, file)]);
      queue = queue.then(async () => {
        let stored = 0;
        for (const [file, row] of rows) if (await upload(file, row, false)) stored += 1;
        if (stored) await refreshListing();
      }).catch((error) => {
        if (error.status === 401) loginAgain();
      });
    }

    const input = document.getElementById("upload-input");
    input.addEventListener("change", () => {
      enqueue([...input.files]);
      input.value = "";
    });

    // Dropping anywhere on the page uploads to the folder shown.
    const carriesFiles = (event) => [...(event.dataTransfer?.types || [])].includes("Files");
    let depth = 0;
    const dragging = (on) => document.body.classList.toggle("dragging", on);
    document.addEventListener("dragenter", (event) => {
      if (!carriesFiles(event)) return;
      event.preventDefault();
      depth += 1;
      dragging(true);
    });
    document.addEventListener("dragover", (event) => {
      if (!carriesFiles(event)) return;
      event.preventDefault();
      event.dataTransfer.dropEffect = "copy";
    });
    document.addEventListener("dragleave", (event) => {
      if (!carriesFiles(event)) return;
      depth = Math.max(0, depth - 1);
      if (!depth) dragging(false);
    });
    document.addEventListener("drop", (event) => {
      if (!carriesFiles(event)) return;
      event.preventDefault();
      depth = 0;
      dragging(false);
      const files = [];
      for (const item of event.dataTransfer.items) {
        if (item.kind !== "file") continue;
        const file = item.getAsFile();
        if (item.webkitGetAsEntry?.()?.isDirectory) {
          uploadRow(list, file).failed("folders cannot be uploaded from the browser: "
            + `use paddlectl cp -r ${file.name} ${dir}/`);
        } else if (file) {
          files.push(file);
        }
      }
      if (files.length) enqueue(files);
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const zone = document.getElementById("upload");
    if (zone) start(zone);
  });

  window.PaddleCloud.Sha256 = Sha256;
})();
