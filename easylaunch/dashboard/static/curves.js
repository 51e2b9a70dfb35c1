// easylaunch ui: learning curves drawn in the browser with uPlot (served from the package).
// A [data-curves] element names its runs (data-runs="ID,ID" or data-sweep="ID", its first metric
// shown data-metric) or a search (data-search="ID": its objective over trials, x data-x) and a
// layout: "one" chart with a metric to pick, or "each" metric its own chart. Controls: log axis,
// smoothing (TensorBoard's debiased moving average; data-no-smoothing: none); drag to zoom (the
// server sends every point in the zoomed range), double-click to see all again; hover for
// values. While a run is open (or the page follows a search) the curves are asked for again.
// Runs that ended early (failed, timed out, cancelled) are drawn apart: thin and dashed. Labels
// reach uPlot as text (it sets textContent).
"use strict";

(function () {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
  const pollMs = Number(meta("easylaunch-charts-poll-ms"));
  const HEIGHT = 300;

  async function getJSON(url) {
    const answer = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    const body = await answer.json();
    if (!answer.ok) throw new Error(body.error || `${answer.status}`);
    return body;
  }

  const colour = (i) => `hsl(${(i * 137.508) % 360}, 65%, 42%)`;

  // How a series is drawn where the server says (a search's trials: points; its best: steps).
  const shapes = {
    points: { paths: () => null, points: { show: true, size: 7 } },
    steps: { paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } },
  };
  // Ticks of an axis of whole numbers (steps, trials): 1, 2, 5, 10, 20, 50, ...
  const WHOLE = [...Array(10).keys()].flatMap((p) => [1, 2, 5].map((m) => m * 10 ** p));

  // A series smoothed as TensorBoard does: an exponential moving average, debiased; gaps stay.
  function smooth(ys, weight) {
    if (!weight) return ys;
    let last = 0, seen = 0;
    return ys.map((y) => {
      if (y === null || !Number.isFinite(y)) return null;
      last = last * weight + (1 - weight) * y;
      seen += 1;
      return last / (1 - Math.pow(weight, seen));
    });
  }

  // One metric's chart: its uPlot, the data as the server sent it, and the range it covers.
  class Chart {
    constructor(panel, metric, curve) {
      this.panel = panel;
      this.metric = metric;
      this.figure = document.createElement("figure");
      this.figure.className = "curve";
      this.figure.dataset.metric = metric;
      this.caption = document.createElement("figcaption");
      this.body = document.createElement("div");
      this.figure.append(this.caption, this.body);
      this.figure.chart = this;  // (for tests and the console)
      new ResizeObserver(() => this.plot && this.plot.setSize(
        { width: Math.max(this.body.clientWidth, 280), height: HEIGHT })).observe(this.body);
      this.zoomed = null;  // [lo, hi] while zoomed in
      this.curve = curve;
    }

    data() {
      const log = this.panel.log;
      const ys = this.curve.ys.map((y) => smooth(y, this.panel.weight))
        .map((y) => (log ? y.map((v) => (v !== null && v > 0 ? v : null)) : y));
      return [this.curve.x, ...ys];
    }

    describe() {
      const c = this.curve;
      const runs = this.panel.runs.length;
      const each = c.per_point > 1
        ? `each point the mean of ~${c.per_point.toFixed(1)} steps (zoom in for every point)`
        : "every point";
      const apart = this.panel.runs.filter((r) => r.apart).length;
      const counted = this.panel.counted || `${runs} run${runs === 1 ? "" : "s"}`;
      this.caption.textContent = `${this.metric} · ${counted} · ${each}`
        + (apart ? ` · dashed: ${apart} that failed, timed out or were cancelled` : "")
        + (this.panel.weight ? ` · smoothed ${this.panel.weight}` : "")
        + (this.panel.log ? " · log axis" : "");
    }

    draw() {
      if (this.plot) this.plot.destroy();
      const panel = this.panel;
      const opts = {
        width: Math.max(this.body.clientWidth, 280),
        height: HEIGHT,
        scales: { x: { time: false }, y: { distr: panel.log ? 3 : 1 } },
        axes: [{ label: panel.x,
                 incrs: this.curve.x.every(Number.isInteger) ? WHOLE : undefined },
               { size: 60 }],
        series: [{ label: panel.x }, ...panel.runs.map((run, i) => ({
          label: run.label, stroke: colour(i), width: run.apart ? 1 : 1.5, spanGaps: true,
          dash: run.apart ? [6, 4] : undefined, ...shapes[run.shape],
        }))],
        legend: { live: true },
        cursor: { drag: { x: true, y: false } },
        hooks: { setSelect: [(u) => this.zoomTo(u)] },
      };
      this.plot = new uPlot(opts, this.data(), this.body);
      this.figure.plot = this.plot;
      this.plot.over.addEventListener("dblclick", () => this.zoomOut());
      if (this.zoomed) this.plot.setScale("x", { min: this.zoomed[0], max: this.zoomed[1] });
      this.describe();
    }

    // A selection dragged on the chart: show that range, with every point the server has.
    async zoomTo(u) {
      if (u.select.width < 2) return;
      const lo = u.posToVal(u.select.left, "x"), hi = u.posToVal(u.select.left + u.select.width, "x");
      this.zoomed = [lo, hi];
      if (this.curve.per_point > 1 || this.wasThinned) {
        this.wasThinned = true;
        this.curve = await this.panel.fetchCurve(this.metric, lo, hi);
        this.plot.setData(this.data(), false);
        this.plot.setScale("x", { min: lo, max: hi });
      }
      this.describe();
    }

    async zoomOut() {
      this.zoomed = null;
      if (this.wasThinned) this.curve = await this.panel.fetchCurve(this.metric);
      this.plot.setData(this.data(), true);
      this.describe();
    }

    update(curve) {
      this.curve = curve;
      this.plot.setData(this.data(), true);
      this.describe();
    }
  }

  class Panel {
    constructor(holder) {
      this.holder = holder;
      const [by] = ["search", "sweep", "runs"].filter((key) => key in holder.dataset);
      this.query = `${by}=${encodeURIComponent(holder.dataset[by])}`;
      this.x = holder.dataset.x || "step";
      this.each = holder.dataset.layout === "each";
      this.log = false;
      this.weight = 0;
      this.charts = new Map();
      this.runs = [];
      this.metrics = [];
      this.controls();
      this.note = document.createElement("p");
      this.note.className = "quiet";
      this.area = document.createElement("div");
      this.area.className = "curve-area";
      holder.append(this.note, this.area);
      holder.panel = this;
      this.load();
    }

    controls() {
      const bar = document.createElement("div");
      bar.className = "curve-controls";
      if (!this.each) {
        const label = document.createElement("label");
        label.textContent = "metric ";
        this.select = document.createElement("select");
        this.select.dataset.control = "metric";
        this.select.addEventListener("change", () => this.load());
        label.append(this.select);
        bar.append(label);
      }
      const log = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.dataset.control = "log";
      box.addEventListener("change", () => {
        this.log = box.checked;
        this.charts.forEach((c) => c.draw());
      });
      log.append(box, " log axis");
      const smoothing = document.createElement("label");
      const range = document.createElement("input");
      Object.assign(range, { type: "range", min: "0", max: "0.99", step: "0.01", value: "0" });
      range.dataset.control = "smoothing";
      const shown = document.createElement("span");
      shown.textContent = "0";
      range.addEventListener("input", () => {
        this.weight = Number(range.value);
        shown.textContent = range.value;
        this.charts.forEach((c) => {
          c.plot.setData(c.data(), !c.zoomed);
          c.describe();
        });
      });
      smoothing.append("smoothing ", range, " ", shown);
      const hint = document.createElement("span");
      hint.className = "quiet";
      hint.textContent = "drag to zoom, double-click for all; click a legend entry to hide a run";
      bar.append(log, ...("noSmoothing" in this.holder.dataset ? [] : [smoothing]), hint);
      this.holder.append(bar);
    }

    url(metrics, lo, hi) {
      let url = `/api/curves?${this.query}&metrics=${encodeURIComponent(metrics.join(","))}`;
      if (lo !== undefined) url += `&lo=${lo}&hi=${hi}`;
      return url;
    }

    async fetchCurve(metric, lo, hi) {
      const answer = await getJSON(this.url([metric], lo, hi));
      return answer.curves[metric];
    }

    // The metrics to ask for: all ("each"), or the one picked (none yet: the first).
    asked() {
      if (this.each) return ["*"];
      const chosen = this.select.value || new URLSearchParams(location.search).get("metric")
        || this.holder.dataset.metric;
      return chosen ? [chosen] : [];
    }

    async load() {
      let answer;
      try {
        answer = await getJSON(this.url(this.asked()));
      } catch (err) {
        this.note.textContent = `curves not read: ${err.message}`;
        this.timer = setTimeout(() => this.load(), pollMs);
        return;
      }
      const labels = (runs) => runs.map((r) => r.label).join("\n");
      const sameRuns = labels(answer.runs) === labels(this.runs);
      this.runs = answer.runs;
      this.metrics = answer.metrics;
      this.counted = answer.counted;
      this.fillSelect(Object.keys(answer.curves)[0]);
      this.note.textContent = this.metrics.length ? "" : "no metrics logged yet "
        + "(easylaunch.log_metrics, progress.csv or TensorBoard files in the run folder)";
      for (const [metric, chart] of this.charts) {
        if (!(metric in answer.curves)) {
          chart.plot.destroy();
          chart.figure.remove();
          this.charts.delete(metric);
        }
      }
      const redraw = [];
      for (const [metric, curve] of Object.entries(answer.curves)) {
        const chart = this.charts.get(metric);
        if (chart && sameRuns) {
          if (!chart.zoomed) chart.update(curve);
          continue;
        }
        const fresh = chart || new Chart(this, metric, curve);
        fresh.curve = curve;
        if (!chart) {
          this.area.append(fresh.figure);
          this.charts.set(metric, fresh);
        }
        redraw.push(fresh);
      }
      redraw.forEach((chart) => chart.draw());  // (once all are placed: their widths are known)
      this.showHparams(Object.keys(answer.curves)[0]);
      clearTimeout(this.timer);
      // (while the page follows a search, its next trials' runs are to come: asked again too)
      if (this.runs.some((r) => r.open) || document.querySelector("[data-follow][data-open]")) {
        this.timer = setTimeout(() => this.load(), pollMs);
      }
    }

    fillSelect(chosen) {
      if (this.each || this.select.options.length === this.metrics.length) return;
      this.select.replaceChildren(...this.metrics.map((m) => new Option(m, m, false, m === chosen)));
    }

    // The sweep's hyperparameter view, for the metric shown (its markup escaped by the server).
    async showHparams(metric) {
      const url = this.holder.dataset.hparamsUrl;
      const shown = document.querySelector("[data-hparams]");
      if (!url || !metric || !shown || metric === shown.dataset.metric) return;
      shown.dataset.metric = metric;
      const answer = await fetch(`${url}?metric=${encodeURIComponent(metric)}`,
                                 { credentials: "same-origin" });
      if (!answer.ok) return;
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const old = document.querySelector("[data-hparams]");
      if (old) old.replaceWith(document.importNode(page.querySelector("[data-hparams]"), true));
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-curves]").forEach((holder) => new Panel(holder));
  });
})();
