// The in-page half of `python -m mfattn check-html` (mfattn/companion/checkhtml.py), evaluated in every
// page of the built book; checkhtml writes its thresholds into the __NAME__ placeholders. It returns a
// list of [kind, message], one a fault. The figures' text is figcheck.js's.
async () => {
  const faults = [];
  const COLUMN_CHARS = __CHARS__, COLUMN_PX = __PX__, PHONE_PX = __PHONEPX__;
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await Promise.race([MathJax.startup.promise, new Promise(r => setTimeout(r, 10000))]);
  }
  const col = document.querySelector('article.bd-article') || document.querySelector('article')
              || document.querySelector('main') || document.body;
  if (!col) return faults;
  const colRect = col.getBoundingClientRect();
  const describe = el => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    if (el.classList.length) s += '.' + Array.from(el.classList).slice(0, 2).join('.');
    const text = Array.from((el.innerText || el.textContent || '').trim().replace(/\s+/g, ' ')).slice(0, 60).join('');
    return text ? `${s} "${text}"` : s;
  };
  // an element's own text, without that of its children (math, code, links are judged on their own)
  const ownText = el => Array.from(el.childNodes).filter(n => n.nodeType === Node.TEXT_NODE)
                               .map(n => n.textContent).join('');
  // the rounded tops of the lines that the characters [a, b) of the text node n are drawn on, in order
  const lineTops = (n, a, b) => {
    const r = document.createRange();
    r.setStart(n, a);
    r.setEnd(n, b);
    return new Set(Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => Math.round(x.top)));
  };
  // whether an element lies in a <figure> with a non-empty caption
  const captioned = el => Boolean(el.closest('figure')?.querySelector('figcaption')?.innerText.trim());
  // math
  for (const m of col.querySelectorAll('.math')) {
    if (!m.querySelector('mjx-container')) faults.push(['math', 'unrendered: ' + describe(m)]);
  }
  for (const e of col.querySelectorAll('mjx-merror, merror')) faults.push(['math', 'MathJax error: ' + describe(e)]);
  for (const p of col.querySelectorAll('p, li, td, dd, h1, h2, h3, h4, figcaption')) {
    if (p.closest('pre, code, .cell_input, .cell_output, .highlight')) continue;
    const text = ownText(p);
    if (/\$\$|\\\(|\\\[/.test(text)) faults.push(['math', 'TeX left in the text: ' + describe(p)]);
    // a single $...$ pair around TeX (a backslash, ^, _ or a brace inside) that MathJax never saw
    else if (/\$[^$\s][^$]*[\\^_{}][^$]*\$/.test(text)) faults.push(['math', 'TeX left in the text: ' + describe(p)]);
    // a MyST role that reached the page as text (glued Markdown parsed as CommonMark shows "{math}" before code)
    if (/\{(math|glue:\w+|ref|numref|cite|eq)\}/.test(text)) faults.push(['myst', 'a MyST role left in the text: ' + describe(p)]);
  }
  // e-notation in the prose: code, math and outputs aside
  for (const p of col.querySelectorAll('p, li, dd, h1, h2, h3, h4, figcaption, summary')) {
    if (p.closest('pre, code, table, .cell_input, .cell_output, .output, .highlight, mjx-container')) continue;
    const text = ownText(p);
    const m = text.match(/(^|[^\w.])(\d(?:\.\d+)?e[-+]?\d+)(?!\w|\.\d)/);
    if (m) faults.push(['enotation', `"${m[2]}" in the prose: ` + describe(p)]);
  }
  // a number's sign printed as a hyphen-minus in the prose or a table (the math and the tables write
  // U+2212): code and printed outputs aside; a hyphen after a letter, digit, point or dash is a hyphen
  for (const p of col.querySelectorAll('p, li, dd, td, th, h1, h2, h3, h4, figcaption, summary')) {
    if (p.closest('pre, code, kbd, samp, .cell_input, .highlight, mjx-container')) continue;
    const text = ownText(p);
    // TeX left in the text is the math check's fault, not this one's
    const m = text.replace(/\$[^$]*\$/g, '').match(/__SIGN__[\d.]*/);
    if (m) faults.push(['minus', `"${m[0]}" with a hyphen for its sign: ` + describe(p)]);
  }
  // a column of sentences squeezed by its neighbours: its cells hold COLUMN_CHARS characters or more on
  // average and it is narrower than COLUMN_PX (a column of short numbers may be as narrow as it likes)
  for (const t of col.querySelectorAll('table')) {
    if (t.closest('pre, .cell_input, .highlight')) continue;
    const rows = Array.from(t.rows);
    const widest = rows.reduce((a, r) => (!a || r.cells.length > a.cells.length) ? r : a, null);
    if (!widest) continue;
    for (let j = 0; j < widest.cells.length; j++) {
      const cells = rows.map(r => r.cells[j]).filter(c => c && c.tagName === 'TD');
      if (!cells.length) continue;
      const chars = cells.reduce((a, c) => a + c.innerText.trim().length, 0) / cells.length;
      const w = widest.cells[j].getBoundingClientRect().width;
      if (chars >= COLUMN_CHARS && w < COLUMN_PX)
        faults.push(['column', `column ${j + 1} is ${Math.round(w)} px wide for ${Math.round(chars)} characters a cell: `
                     + describe(t)]);
    }
  }
  faults.push(['__height', String(document.documentElement.scrollHeight)]);
  // tables: a word or a number broken across lines inside a cell (the cell is narrower than it)
  for (const cell of col.querySelectorAll('td, th')) {
    if (cell.closest('.cell_input, pre')) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let broken = null;
    for (let n = walker.nextNode(); n && !broken; n = walker.nextNode()) {
      if (n.parentElement.closest('mjx-container')) continue;
      const re = /\S{2,}/g;
      let m;
      while ((m = re.exec(n.textContent)) && !broken) {
        if (lineTops(n, m.index, m.index + m[0].length).size < 2) continue;
        // where the line breaks: after a hyphen that joins two words is ordinary typesetting
        let first = null, at = -1;
        for (let i = 0; i < m[0].length; i++) {
          const [top] = lineTops(n, m.index + i, m.index + i + 1);
          if (top === undefined) continue;
          if (first === null) first = top;
          else if (Math.abs(top - first) > 2) { at = i; break; }
        }
        // a break after a hyphen is typesetting, unless it splits a number: a minus sign ("-2.50") or
        // an exponent ("2.50e-01") or a range of numbers ("540-560")
        const w = m[0];
        const splitsNumber = /[0-9]/.test(w[at]) && (at === 1 || /[0-9]/.test(w[at - 2])
                             || (w[at - 2] === 'e' && at >= 3 && /[0-9]/.test(w[at - 3])));
        if (at > 0 && w[at - 1] === '-' && !splitsNumber) continue;
        broken = m[0];
      }
    }
    if (broken) faults.push(['table', `"${broken}" broken across lines in a table cell: ` + describe(cell)]);
  }
  // captions: a parameter's name in code where its value belongs
  for (const c of col.querySelectorAll('figcaption code, .caption code')) {
    const t = c.innerText.trim();
    if (/^[a-z][a-z0-9]*_[a-z0-9_]+$/.test(t)) faults.push(['caption', `parameter name "${t}" in a caption: ` + describe(c.closest('figcaption, .caption'))]);
  }
  // outputs: a bare Python repr printed for a reader
  for (const pre of col.querySelectorAll('.cell_output pre, .output pre')) {
    for (const line of (pre.innerText || '').split('\n')) {
      const t = line.trim();
      if (/^(True|False|None)$/.test(t) || /^<[\w.]+ object at /.test(t) || /^(tensor|array)\(/.test(t)
          || /\b(True|False)\b/.test(t) && /[a-z]{3}/.test(t.replace(/\b(True|False)\b/g, ''))
             && !/=\s*(True|False)\b/.test(t)
          || /\d\.\d{8,}/.test(t)) {
        faults.push(['repr', 'a bare Python value in an output: ' + JSON.stringify(t.slice(0, 80))]);
        break;
      }
    }
  }
  // outputs and prose: a number that the page breaks across two lines ("1.96e-" / "02"), which a
  // reader then reads as two numbers (tables have their own check above)
  const NUMBER = /[-\u2212+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?/gi;
  const splitIn = (root) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.parentElement.closest('mjx-container, td, th')) continue;
      // code in the prose (a docstring's example, a code chip) wraps by the stylesheet's design
      if (root.tagName !== 'PRE' && n.parentElement.closest('pre, code')) continue;
      for (const m of n.textContent.matchAll(NUMBER)) {
        if (m[0].length < 3) continue;
        if (lineTops(n, m.index, m.index + m[0].length).size > 1) return m[0];
      }
    }
    return null;
  };
  for (const el of col.querySelectorAll('.cell_output pre, .output pre, p, li, dd, figcaption')) {
    if (el.closest('.cell_input') || (el.tagName !== 'PRE' && el.closest('pre'))) continue;
    const broken = splitIn(el);
    if (broken) faults.push(['split', `"${broken}" broken across lines: ` + describe(el)]);
  }
  // images
  for (const img of col.querySelectorAll('img')) {
    const alt = (img.getAttribute('alt') || '').trim();
    const src = img.getAttribute('src') || '';
    const file = src.split('/').pop();
    if (!alt || alt === src || alt === file || /\.(png|jpe?g|svg|gif)$/i.test(alt)) {
      faults.push(['alt', `image without alt text: ${src} (alt "${alt}")`]);
    }
    if (img.closest('.cell_output, .output') && !captioned(img)) {
      faults.push(['caption', 'output figure without a caption: ' + src]);
    }
  }
  // width: the outermost element that leaves the column, or that its own scroll box cuts
  const flagged = [];
  for (const el of col.querySelectorAll('*')) {
    if (el.closest('script, style, noscript')) continue;
    // MathJax's own parts (stretchy extenders clip by design): judge the equation as a whole
    if (el.tagName.toLowerCase() !== 'mjx-container' && el.closest('mjx-container')) continue;
    if (flagged.some(f => f.contains(el))) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const st = getComputedStyle(el);
    if (st.visibility === 'hidden' || st.position === 'fixed') continue;
    if (r.right > colRect.right + 1 || r.left < colRect.left - 1) {
      faults.push(['width', `${Math.round(r.width)} px wide, the column ${Math.round(colRect.width)} px: ` + describe(el)]);
      flagged.push(el);
      continue;
    }
    const clips = ['auto', 'scroll', 'hidden', 'clip'].includes(st.overflowX);
    // an inline box has no client width of its own (0): only block-level scroll boxes can cut
    if (clips && st.display !== 'inline' && el.scrollWidth > el.clientWidth + 1) {
      faults.push(['width', `content ${el.scrollWidth} px cut to ${el.clientWidth} px: ` + describe(el)]);
      flagged.push(el);
    }
  }
  // animations (matplotlib's to_jshtml player): press play; the slider and the picture must move on,
  // and the player, like a figure, needs a caption
  for (const [k, div] of Array.from(col.querySelectorAll('div.animation')).entries()) {
    const img = div.querySelector('img');
    const slider = div.querySelector('input[type=range]');
    const play = div.querySelector('button[title="Play"]');
    const name = `animation ${k + 1} of the page`;
    if (!img || !slider || !play) { faults.push(['animation', `${name}: no picture, slider or play button`]); continue; }
    if (!captioned(div)) faults.push(['caption', `${name} without a caption`]);
    const v0 = Number(slider.value), src0 = img.getAttribute('src');
    play.click();
    await new Promise(r => setTimeout(r, 1500));
    const v1 = Number(slider.value), src1 = img.getAttribute('src');
    div.querySelector('button[title="Pause"]')?.click();
    if (!(v1 > v0) || src1 === src0) {
      faults.push(['animation', `${name}: the frames did not advance after play (frame ${v0} to ${v1}` +
                                 (src1 === src0 ? ', the same picture)' : ')')]);
    }
  }
  // a code chip in the prose that cannot break and would leave a phone's column: its longest piece
  // without a break opportunity (a space, where white-space lets it wrap; any character, where
  // overflow-wrap or word-break allow it and white-space does not forbid every break) wider than PHONE_PX
  for (const c of col.querySelectorAll('p code, li code, dd code, figcaption code, summary code')) {
    if (c.closest('pre, .cell_input, .cell_output, .highlight, table')) continue;
    const parts = [c, ...c.querySelectorAll('*')].map(e => getComputedStyle(e));
    const nowrap = parts.some(st => /^(nowrap|pre)$/.test(st.whiteSpace));
    if (!nowrap && parts.every(st => st.overflowWrap === 'anywhere' || st.overflowWrap === 'break-word'
                                     || st.wordBreak === 'break-all')) continue;
    const text = c.textContent;
    const longest = nowrap ? text.length : Math.max(...text.split(/\s+/).map(t => t.length));
    const w = c.getBoundingClientRect().width * longest / Math.max(1, text.length);
    if (w > PHONE_PX) faults.push(['chip', `a code chip ${Math.round(w)} px wide without a break, wider than a phone's ` +
                                           `column (${PHONE_PX} px): ` + describe(c)]);
  }
  return faults;
}
