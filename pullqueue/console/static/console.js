// Glue for the pullqueue console: draws each queue's backlog plot (uPlot) from /api/backlog,
// again after every htmx refresh. Everything else is server-rendered HTML and htmx attributes.
(function () {
  var charts = [];
  function draw() {
    var boxes = document.querySelectorAll(".plot[data-queue]");
    if (!boxes.length || typeof uPlot === "undefined") return;
    fetch("/api/backlog", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : {}; })
      .then(function (series) {
        charts.forEach(function (c) { c.destroy(); });
        charts = [];
        boxes.forEach(function (box) {
          var data = series[box.dataset.queue] || [[], []];
          var wide = box.classList.contains("wide");
          box.textContent = "";
          if (!data[1].some(function (v) { return v !== null; })) {
            box.textContent = data[0].length ? "backlog unknown" : "no reading yet";
            box.classList.add("unknown");
            return;
          }
          charts.push(new uPlot({
            width: wide ? Math.min(box.clientWidth || 800, 900) : 220,
            height: wide ? 220 : 48,
            legend: { show: wide },
            cursor: { show: wide },
            axes: wide ? [{}, { label: "backlog" }] : [{ show: false }, { show: false }],
            series: [{}, { label: "backlog", stroke: "#2b6cb0", fill: "rgba(43,108,176,0.15)", spanGaps: false }],
            scales: { x: { time: true } },
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
