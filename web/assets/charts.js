// Small live charts, drawn as SVG: the last few minutes of one figure.

import {h, replace, s} from "./dom.js";
import {number} from "./format.js";

const WIDTH = 240;
const HEIGHT = 56;

export class Sparkline {
  /** A chart titled ``title`` in ``container``, keeping the last ``size`` values. */
  constructor(container, {id, title, unit = "", size = 120}) {
    this.values = [];
    this.size = size;
    this.unit = unit;
    this.current = h("span", {class: "chart-value"}, "–");
    this.peak = h("span", {class: "note"});
    this.line = s("polyline", {class: "chart-line", points: ""});
    this.area = s("polygon", {class: "chart-area", points: ""});
    const svg = s("svg", {viewBox: `0 0 ${WIDTH} ${HEIGHT}`, preserveAspectRatio: "none", role: "img",
      "aria-label": title}, this.area, this.line);
    container.append(h("figure", {class: "chart", dataset: {chart: id}},
      h("figcaption", {}, h("span", {}, title), this.current), svg, this.peak));
  }

  push(value) {
    this.values.push(Math.max(0, value));
    if (this.values.length > this.size) this.values.shift();
    this.draw();
  }

  reset() {
    this.values = [];
    this.draw();
  }

  draw() {
    const values = this.values;
    const max = values.length ? Math.max(...values) : 0;
    const top = Math.max(1, max); // the chart's scale: at least 1, so a quiet line lies flat at the bottom
    const step = WIDTH / Math.max(1, this.size - 1);
    const offset = (this.size - values.length) * step;
    const points = values.map((value, i) =>
      `${(offset + i * step).toFixed(1)},${(HEIGHT - 2 - (value / top) * (HEIGHT - 4)).toFixed(1)}`);
    this.line.setAttribute("points", points.join(" "));
    this.area.setAttribute("points", points.length
      ? `${offset.toFixed(1)},${HEIGHT} ${points.join(" ")} ${WIDTH},${HEIGHT}` : "");
    const last = values.length ? values[values.length - 1] : null;
    replace(this.current, last === null ? "–" : `${number(Math.round(last * 100) / 100)}${this.unit}`);
    replace(this.peak, values.length ? `peak ${number(Math.round(max * 100) / 100)}${this.unit}` : "");
  }
}
