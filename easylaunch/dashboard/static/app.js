// easylaunch ui: live states, following logs and a search's trials, the Cancel and Resubmit
// actions, sortable and filterable tables, runs picked to compare.
// Whatever comes from runs (states, log lines) enters the page as text (textContent or text
// nodes), never as HTML; a search's trials come as markup the server escaped.
"use strict";

(function () {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
  const token = meta("easylaunch-token");
  const tokenHeader = meta("easylaunch-token-header");
  const pollMs = Number(meta("easylaunch-poll-ms"));
  const LOG_KEEP_CHARS = 1 << 20;  // a log box keeps about its last 1 MB of text

  // The JSON a GET answers; an answer that is not OK throws its error with its status (a
  // failed connection throws without one).
  async function getJSON(url) {
    const answer = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    const body = await answer.json();
    if (!answer.ok) throw Object.assign(new Error(body.error || `${answer.status}`),
                                        { status: answer.status });
    return body;
  }

  // One run's state (and time run, job) in whatever element holds it ([data-run]).
  function showState(holder, seen) {
    const cell = holder.querySelector('[data-field="state"]');
    cell.textContent = seen.state;
    cell.className = "state state-" + seen.state.split(" ")[0];
    for (const field of ["duration", "job", "reason"]) {
      const other = holder.querySelector(`[data-field="${field}"]`);
      if (other && seen[field] !== undefined) other.textContent = seen[field];
    }
    if (!seen.open) {
      delete holder.dataset.open;
      const cancel = holder.querySelector('button[data-action="cancel"]');
      if (cancel) cancel.disabled = true;
    }
  }

  // Ask for the states of the open runs shown every few seconds, until none is open.
  function followStates() {
    async function tick() {
      const open = [...document.querySelectorAll("[data-run][data-open]")];
      if (!open.length) return;
      try {
        const ids = open.map((holder) => holder.dataset.run).join(",");
        const states = await getJSON("/api/states?ids=" + encodeURIComponent(ids));
        for (const holder of open) {
          if (states[holder.dataset.run]) showState(holder, states[holder.dataset.run]);
        }
        recount();
      } catch (err) {
        // (the server may be restarting: ask again next time)
      }
      setTimeout(tick, pollMs);
    }
    setTimeout(tick, pollMs);
  }

  // A part of the page the server renders ([data-follow]: its URL; a search's trials), asked
  // for again every few seconds while it says it goes on (data-open); its markup is the
  // server's, escaped there.
  function followPart(part) {
    async function tick() {
      try {
        const answer = await fetch(part.dataset.follow, { credentials: "same-origin",
                                                          cache: "no-store" });
        const page = new DOMParser().parseFromString(await answer.text(), "text/html");
        const fresh = answer.ok && page.querySelector("[data-follow]");
        if (fresh) {
          const placed = document.importNode(fresh, true);
          part.replaceWith(placed);
          part = placed;
        }
      } catch (err) {
        // (the server may be restarting: ask again next time)
      }
      if (part.dataset.open) setTimeout(tick, pollMs);
    }
    setTimeout(tick, pollMs);
  }

  // Add text to a log box, dropping whole lines from its top past LOG_KEEP_CHARS.
  function appendLog(pre, text) {
    pre.append(document.createTextNode(text));
    let extra = pre.textContent.length - LOG_KEEP_CHARS;
    while (extra > 0 && pre.firstChild) {
      const first = pre.firstChild;
      if (first.length <= extra) {
        extra -= first.length;
        first.remove();
      } else {
        const lineEnd = first.data.indexOf("\n", extra - 1);
        first.deleteData(0, lineEnd < 0 ? extra : lineEnd + 1);
        extra = 0;
      }
    }
  }

  // Show the end of a log, then what the run adds to it, until the run has ended. A file
  // that shrank (the server answers from an offset before the one asked) is shown anew.
  function followLog(pre) {
    const stream = pre.dataset.log;
    const note = document.querySelector(`[data-note="${stream}"]`);
    let offset = -1;
    async function tick() {
      let chunk;
      try {
        chunk = await getJSON(`${pre.dataset.url}?stream=${stream}&offset=${offset}`);
      } catch (err) {
        note.textContent = `(not read: ${err.message})`;
        if (!err.status) setTimeout(tick, pollMs);  // (the server may be restarting)
        return;
      }
      if (offset >= 0 && chunk.offset < offset) pre.textContent = "";  // (it shrank)
      if (chunk.text) {
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        appendLog(pre, chunk.text);
        if (atEnd) pre.scrollTop = pre.scrollHeight;
      }
      offset = chunk.offset;
      if (chunk.open || chunk.text) {
        note.textContent = chunk.open ? "(following)" : "";
        setTimeout(tick, chunk.text ? 250 : pollMs);
      } else {
        note.textContent = pre.textContent ? "(the run has ended)" : "(empty)";
      }
    }
    tick();
  }

  // Cancel / Resubmit: a POST carrying the token, after the user confirms.
  function actions(button) {
    button.addEventListener("click", async () => {
      if (!window.confirm(button.dataset.confirm)) return;
      const holder = button.closest("[data-run]");
      const said = holder.querySelector(".action-result");
      const action = button.dataset.action;
      button.disabled = true;
      said.textContent = action === "cancel" ? "cancelling…" : "resubmitting…";
      try {
        const answer = await fetch(
          `/api/runs/${encodeURIComponent(holder.dataset.run)}/${action}`,
          { method: "POST", credentials: "same-origin", headers: { [tokenHeader]: token } });
        const body = await answer.json();
        if (!answer.ok) throw new Error(body.error || `${answer.status}`);
        if (body.url) {
          window.location.assign(body.url);
          return;
        }
        said.textContent = "";
        showState(holder, { state: body.state, open: false });
      } catch (err) {
        said.textContent = `${action} failed: ${err.message}`;
        button.disabled = false;
      }
    });
  }

  // Click a header to sort by its column (numbers as numbers; a cell's data-sort, where it
  // has one, is what it sorts by), again to reverse. Each table body (a sweep's runs) is
  // sorted on its own, its heading row kept first.
  function sortable(table) {
    const headers = [...table.tHead.rows[0].cells];
    headers.forEach((th, column) => {
      if (th.hasAttribute("data-nosort")) return;
      th.addEventListener("click", () => {
        const order = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
        headers.forEach((other) => other.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", order);
        const value = (row) => {
          const cell = row.cells[column];
          return (cell.dataset.sort ?? cell.textContent).trim();
        };
        const number = (text) => (text === "" ? NaN : Number(text));
        const sign = order === "ascending" ? 1 : -1;
        for (const body of table.tBodies) {
          const rows = [...body.rows].filter((row) => !row.classList.contains("group"));
          rows.sort((a, b) => {
            const [x, y] = [value(a), value(b)];
            const [nx, ny] = [number(x), number(y)];
            if (!isNaN(nx) && !isNaN(ny)) return sign * (nx - ny);
            if (isNaN(nx) !== isNaN(ny)) return isNaN(nx) ? 1 : -1;  // numbers before the rest
            return sign * x.localeCompare(y, undefined, { numeric: true });
          });
          body.append(...rows);
        }
      });
    });
  }

  // Show only the rows holding some text (or, from a reason's button, that reason).
  function filterRows(input) {
    const table = document.getElementById(input.dataset.filterRows);
    const apply = () => {
      const wanted = input.value.trim().toLowerCase();
      for (const row of table.tBodies[0].rows) {
        const reason = input.dataset.reason;
        row.hidden = reason !== undefined ? row.dataset.reason !== reason
          : !!wanted && !row.textContent.toLowerCase().includes(wanted);
      }
    };
    input.addEventListener("input", () => {
      delete input.dataset.reason;
      apply();
    });
    document.querySelectorAll("[data-filter-reason]").forEach((button) => {
      button.addEventListener("click", () => {
        input.value = button.dataset.filterReason;
        input.dataset.reason = button.dataset.filterReason;
        apply();
      });
    });
  }

  // Runs picked to compare, kept in this browser (any sweep's page adds to them).
  const PICKS = "easylaunch-picks";
  const picks = () => JSON.parse(localStorage.getItem(PICKS) || "[]");

  function showPicks() {
    const picked = picks();
    for (const link of document.querySelectorAll("a[data-compare]")) {
      link.textContent = `compare (${picked.length})`;
      link.href = "/compare?runs=" + encodeURIComponent(picked.join(","));
    }
    for (const box of document.querySelectorAll("input[data-pick]")) {
      box.checked = picked.includes(box.dataset.pick);
    }
  }

  function pickable(box) {
    box.addEventListener("change", () => {
      const others = picks().filter((id) => id !== box.dataset.pick);
      localStorage.setItem(PICKS, JSON.stringify(box.checked ? [...others, box.dataset.pick] : others));
      showPicks();
    });
  }

  // A sweep page's counts, from the states its rows show now.
  function recount() {
    const counts = document.querySelector("[data-counts]");
    if (!counts) return;
    const found = {};
    document.querySelectorAll("#results [data-field=state]").forEach((cell) => {
      const state = cell.textContent.split(" ")[0];
      found[state] = (found[state] || 0) + 1;
    });
    const order = ["queued", "running", "succeeded", "failed", "timeout", "cancelled"];
    const states = [...order.filter((s) => found[s]), ...Object.keys(found).filter((s) => !order.includes(s)).sort()];
    counts.textContent = states.map((s) => `${found[s]} ${s}`).join(", ");
  }

  document.addEventListener("DOMContentLoaded", () => {
    followStates();
    document.querySelectorAll("pre[data-log]").forEach(followLog);
    document.querySelectorAll("[data-follow][data-open]").forEach(followPart);
    document.querySelectorAll("input[data-pick]").forEach(pickable);
    document.querySelectorAll("input[data-filter-rows]").forEach(filterRows);
    document.querySelectorAll("button[data-clear-picks]").forEach((button) => {
      button.addEventListener("click", () => {
        localStorage.removeItem(PICKS);
        window.location.assign("/compare");
      });
    });
    const noPicks = document.querySelector("[data-no-picks]");
    if (noPicks && picks().length) window.location.replace("/compare?runs=" + encodeURIComponent(picks().join(",")));
    // A compare page whose URL names runs (a link someone sent): those are the runs picked.
    const compared = document.querySelector("[data-compared]");
    if (compared) localStorage.setItem(PICKS, JSON.stringify(compared.dataset.compared.split(",")));
    showPicks();
    document.querySelectorAll("button[data-action]").forEach(actions);
    document.querySelectorAll("table.sortable").forEach(sortable);
  });
})();
