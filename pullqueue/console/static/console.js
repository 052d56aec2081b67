// Glue for the pullqueue console: draws each queue's backlog plot (uPlot) from /api/backlog,
// again after every htmx refresh. Everything else is server-rendered HTML and htmx attributes.
(function () {
  var charts = [];
  window.pullqueuePlots = charts;
  var MIN_WINDOW = 60; // seconds shown at least: one reading is a point, not a stretched axis
  var FONT = "12px system-ui, sans-serif";
  // Ticks at whole seconds (and whole minutes, hours) on x; at whole tasks on y.
  var TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
  var COUNT_STEPS = [];
  for (var p = 1; p <= 1e12; p *= 10) COUNT_STEPS.push(p, 2 * p, 5 * p);
  var measure = document.createElement("canvas").getContext("2d");

  function two(n) { return (n < 10 ? "0" : "") + n; }

  function clock(seconds, step) {
    var d = new Date(seconds * 1000);
    var text = two(d.getHours()) + ":" + two(d.getMinutes());
    return step < 60 ? text + ":" + two(d.getSeconds()) : text;
  }

  function counts(u, splits) {
    return splits.map(function (v) { return v == null ? "" : v.toLocaleString("en-US"); });
  }

  function countAxisSize(u, values) {
    // Wide enough for the widest tick label, the tick and the axis title beside it.
    measure.font = FONT;
    var widest = 0;
    (values || []).forEach(function (v) { widest = Math.max(widest, measure.measureText(v).width); });
    return Math.ceil(widest) + 16;
  }

  function window_(u, min, max) {
    var xs = u.data[0];
    var last = xs.length ? xs[xs.length - 1] : max;
    var first = xs.length ? xs[0] : min;
    var from = Math.min(first, last - MIN_WINDOW);
    return [from, last + (last - from) * 0.02];
  }

  function upTo(u, min, max) {
    var top = Math.max(max || 0, 1);
    return [0, top + Math.max(1, Math.ceil(top * 0.1))];
  }

  function draw() {
    var boxes = document.querySelectorAll(".plot[data-queue]");
    if (!boxes.length || typeof uPlot === "undefined") return;
    fetch("/api/backlog", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : {}; })
      .then(function (series) {
        charts.forEach(function (c) { c.destroy(); });
        charts.length = 0;
        boxes.forEach(function (box) {
          var data = series[box.dataset.queue] || [[], []];
          var wide = box.classList.contains("wide");
          box.textContent = "";
          if (!data[1].some(function (v) { return v !== null; })) {
            // The figures beside (or above) the plot say why; a wide plot says so in words.
            var said = data[0].length ? "backlog unknown" : "no reading yet";
            box.textContent = wide ? said : "—";
            box.title = said;
            box.classList.add("unknown");
            return;
          }
          var axes = wide
            ? [
                {
                  font: FONT,
                  space: 70,
                  incrs: TIME_STEPS,
                  values: function (u, splits, i, space, step) {
                    return splits.map(function (s) { return clock(s, step); });
                  },
                },
                {
                  font: FONT,
                  labelFont: FONT,
                  label: "backlog",
                  labelSize: 18,
                  space: 30,
                  incrs: COUNT_STEPS,
                  values: counts,
                  size: countAxisSize,
                },
              ]
            : [{ show: false }, { show: false }];
          charts.push(new uPlot({
            width: wide ? Math.min(box.clientWidth || 800, 900) : 220,
            height: wide ? 220 : 48,
            legend: { show: false },
            cursor: { show: wide, points: { show: wide } },
            axes: axes,
            series: [
              { value: function (u, s) { return s == null ? "" : clock(s, 1); } },
              { label: "backlog", stroke: "#2b6cb0", fill: "rgba(43,108,176,0.15)", spanGaps: false, points: { show: wide && data[0].length < 12, size: 6 } },
            ],
            scales: { x: { time: true, range: window_ }, y: { range: upTo } },
          }, data, box));
        });
      })
      .catch(function () {});
  }
  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", function (e) {
    if (e.target && (e.target.id === "queue-rows" || e.target.id === "figures")) draw();
  });
})();
