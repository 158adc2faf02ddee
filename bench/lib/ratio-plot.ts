// The "time relative to pt" plot of bench:modes (without the native side) and bench:mediation:
// per benchmark one bar per mode (median of the per-round ratios) with a min–max whisker, a dot
// for the ratio of the 10th percentiles, a dashed line at the goal; one panel per size set.

/** What mode colours the plots share (GPUvm Fig. 4's order). */
export const MODE_COLORS: Record<string, string> = {
  native: '#444', pt: '#1f77b4', 'fv-naive': '#d62728', fv: '#ff7f0e', pv: '#9467bd', 'pv-batch': '#2ca02c',
};

export interface RatioBar {
  bench: string;
  mode: string;
  median: number;
  min: number;
  max: number;
  /** Ratio of the 10th percentiles, if known. */
  low?: number;
}

export interface RatioPanel {
  label: string;
  benches: string[];
  bars: RatioBar[];
}

/** Grid step giving at most ~16 lines over [lo, hi]. */
function gridStep(lo: number, hi: number): number {
  for (const s of [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50]) if ((hi - lo) / s <= 16) return s;
  return 100;
}

export function ratioPlotSvg(title: string, modes: string[], panels: RatioPanel[], goal: number): string {
  const W = 980, ph = 240, top = 50, left = 60, right = 20, gapY = 60;
  const pw = W - left - right;
  const H = top + panels.length * (ph + gapY) + 10;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="10" y="18" font-size="13" font-weight="bold">${title}</text>`,
    `<text x="10" y="36" fill="#555">${modes.map((m) => `<tspan fill="${MODE_COLORS[m] ?? '#000'}" font-weight="bold">■ ${m}</tspan>`).join('  ')}   bar = median of the per-round ratios, whisker = min–max; ● = ratio of the 10th percentiles of all runs; dashed = goal ${goal}×</text>`,
  ];
  panels.forEach((p, si) => {
    const y0 = top + si * (ph + gapY) + 16;
    const vals = p.bars.flatMap((c) => [c.min, c.max, c.low ?? 1]).filter((v) => Number.isFinite(v));
    const lo0 = Math.min(0.8, ...vals), hi0 = Math.max(1.3, ...vals);
    const step = gridStep(lo0, hi0);
    const lo = Math.floor(lo0 / step) * step, hi = Math.ceil(hi0 / step) * step;
    const y = (v: number) => y0 + ph - ((v - lo) / (hi - lo)) * ph;
    parts.push(`<text x="${left}" y="${y0 - 6}" font-weight="bold">${p.label}</text>`);
    parts.push(`<rect x="${left}" y="${y0}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
    for (let k = Math.round(lo / step); k * step <= hi + 1e-9; k++) {
      const v = k * step;
      parts.push(`<line x1="${left}" x2="${left + pw}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="${Math.abs(v - 1) < 1e-9 ? '#888' : '#eee'}"/>`);
      parts.push(`<text x="${left - 5}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${step < 1 ? v.toFixed(1) : v.toFixed(0)}×</text>`);
    }
    parts.push(`<line x1="${left}" x2="${left + pw}" y1="${y(goal).toFixed(1)}" y2="${y(goal).toFixed(1)}" stroke="#c00" stroke-dasharray="5,4"/>`);
    const gw = pw / p.benches.length;
    const bw = (gw * 0.8) / modes.length;
    p.benches.forEach((b, bi) => {
      parts.push(`<text x="${(left + bi * gw + gw / 2).toFixed(1)}" y="${y0 + ph + 14}" text-anchor="middle">${b}</text>`);
      modes.forEach((m, mi) => {
        const c = p.bars.find((x) => x.bench === b && x.mode === m);
        if (!c) return;
        const x0 = left + bi * gw + gw * 0.1 + mi * bw;
        const yv = y(c.median);
        const base = y(1);
        parts.push(`<rect x="${x0.toFixed(1)}" y="${Math.min(yv, base).toFixed(1)}" width="${(bw * 0.9).toFixed(1)}" height="${Math.max(1, Math.abs(base - yv)).toFixed(1)}" fill="${MODE_COLORS[m] ?? '#000'}"><title>${b} ${m}: ${c.median.toFixed(3)}× pt</title></rect>`);
        const cx = x0 + bw * 0.45;
        parts.push(`<line x1="${cx.toFixed(1)}" x2="${cx.toFixed(1)}" y1="${y(c.min).toFixed(1)}" y2="${y(c.max).toFixed(1)}" stroke="#000"/>`);
        if (c.low !== undefined) parts.push(`<circle cx="${cx.toFixed(1)}" cy="${y(c.low).toFixed(1)}" r="2.5" fill="#000"><title>${b} ${m}: ${c.low.toFixed(3)}× pt (10th percentiles)</title></circle>`);
      });
    });
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
