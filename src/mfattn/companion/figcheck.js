// The figures' half of `python -m mfattn check-html` (mfattn/companion/checkhtml.py), evaluated in every
// page at the desktop's width and again at a phone's: a "figtext" fault for a figure whose smallest text
// the page shows below __TEXTPX__ px high, or a chapter's figure without a record of that text's height.
// It returns a list of [kind, message]; its argument, where, opens each message (the phone's width).
async (where) => {
  const faults = [], TEXT_PX = __TEXTPX__, TEXT_KEY = '__TEXTKEY__';
  const col = document.querySelector('article.bd-article') || document.querySelector('article')
              || document.querySelector('main') || document.body;
  if (!col) return faults;
  // figures: the smallest text as the page shows it, from the record in the PNG (a tEXt chunk)
  const pngText = async (src) => {
    try {
      const buf = new Uint8Array(await (await fetch(src)).arrayBuffer());
      const dv = new DataView(buf.buffer);
      if (buf.length < 8 || dv.getUint32(0) !== 0x89504e47) return null;
      const latin1 = new TextDecoder('latin1');
      for (let at = 8; at + 8 <= buf.length;) {
        const n = dv.getUint32(at), type = latin1.decode(buf.slice(at + 4, at + 8));
        if (type === 'IEND') break;
        if (type === 'tEXt') {
          const data = buf.slice(at + 8, at + 8 + n), z = data.indexOf(0);
          if (z > 0 && latin1.decode(data.slice(0, z)) === TEXT_KEY) return latin1.decode(data.slice(z + 1));
        }
        at += 12 + n;
      }
    } catch (e) { /* an image that cannot be read has no record */ }
    return null;
  };
  for (const img of col.querySelectorAll('div.animation img')) {
    // the animation player's picture: its record is an attribute (plotting.animation), in the frame's pixels
    const rec = img.getAttribute('data-mfattn-text-px');
    const w = img.getBoundingClientRect().width;
    if (rec === null) { faults.push(['figtext', where + 'an animation without a record of its smallest text']); continue; }
    if (!img.naturalWidth || !w || rec === 'none') continue;
    const px = Number(rec) * w / img.naturalWidth;
    if (!(px >= TEXT_PX)) faults.push(['figtext', where + `an animation's smallest text ${px.toFixed(2)} px high as shown, under ${TEXT_PX} px`]);
  }
  for (const img of col.querySelectorAll('img')) {
    if (img.closest('div.animation')) continue;  // the player's picture: above
    const src = img.currentSrc || img.src;
    if (!/\.png([?#]|$)/i.test(src) && !src.startsWith('data:image/png')) continue;
    const w = img.getBoundingClientRect().width;
    if (!img.naturalWidth || !w) continue;
    const rec = await pngText(src);
    const name = (img.getAttribute('src') || '').slice(0, 80);
    if (rec === null) {
      if (img.closest('.cell_output, .output')) faults.push(['figtext', where + 'an output figure without a record of its smallest text: ' + name]);
      continue;
    }
    const px = Number(rec) * w / img.naturalWidth;
    if (rec !== 'none' && !(px >= TEXT_PX)) {
      faults.push(['figtext', where + `smallest text ${px.toFixed(2)} px high as shown (${Math.round(w)} px of the PNG's ` +
                              `${img.naturalWidth}), under ${TEXT_PX} px: ` + name]);
    }
  }
  return faults;
}
