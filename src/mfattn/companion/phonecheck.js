// The phone half of `python -m mfattn check-html` (mfattn/companion/checkhtml.py), evaluated in every page
// after the viewport is narrowed to a phone's. It returns a list of [kind, message]: one "phone" fault
// when the page is wider than the screen, so that a reader would scroll the whole page sideways. It
// names the outermost elements that reach past the right edge outside any box of their own that
// scrolls or clips (a table or a printed output that scrolls in its own box is the book's intent).
() => {
  const root = document.documentElement;
  const screen = root.clientWidth;
  if (root.scrollWidth <= screen + 1) return [];
  const contained = el => {
    for (let p = el.parentElement; p && p !== document.body && p !== root; p = p.parentElement) {
      if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(p).overflowX)) return true;
    }
    return false;
  };
  const past = el => {
    const r = el.getBoundingClientRect();
    const st = getComputedStyle(el);
    return r.width > 0 && r.right > screen + 1 && st.position !== 'fixed' && st.visibility !== 'hidden'
           && !contained(el);
  };
  const names = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (!past(el) || (el.parentElement && el.parentElement !== document.body && past(el.parentElement))) continue;
    let s = el.tagName.toLowerCase();
    if (el.classList.length) s += '.' + Array.from(el.classList).slice(0, 2).join('.');
    const text = (el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 50);
    names.push(`${s} to ${Math.round(el.getBoundingClientRect().right)} px` + (text ? ` "${text}"` : ''));
  }
  return [['phone', `the page is ${root.scrollWidth} px wide on a ${screen} px screen and scrolls sideways` +
                    (names.length ? ': ' + names.slice(0, 3).join('; ') + (names.length > 3 ? ` (+${names.length - 3} more)` : '')
                                  : '')]];
}
