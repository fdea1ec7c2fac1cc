"""The browser view's own pages: the board's page and the one a tab gets when the
training room is full.

textual-serve's page links a Google font and has no title; a training room may be off line,
and a trainee with eight tabs open needs to find the board's. This page loads only what this
server serves (textual-serve's script and xterm's stylesheet) and keeps the element ids and
classes that script looks for: `.textual-terminal` with its `data-` settings, `#start`
(shown with `?delay`) and the body's `-first-byte` and `-closed` states.
"""

from __future__ import annotations

from html import escape

BOARD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<link rel="stylesheet" href="{{ static }}css/xterm.css">
<script src="{{ static }}js/textual.js"></script>
<style>
  body { background: #0c181f; margin: 0; font-family: ui-monospace, Menlo, monospace; }
  .dialog { position: absolute; inset: 0; display: flex; align-items: center;
            justify-content: center; z-index: 10; }
  .box { color: #f2f2f2; background: #12232d; padding: 32px 48px; text-align: center; }
  body.-first-byte .opening { display: none; }
  .textual-terminal { opacity: 0; transition: opacity 0.3s ease-out; }
  body.-first-byte .textual-terminal { opacity: 1; }
  .ended { display: none; }
  body.-closed .ended { display: flex; }
  button { padding: 12px 28px; margin: 16px auto 0; display: block; border: none;
           background: #5e0ba7; color: #f2f2f2; font: inherit; cursor: pointer; }
  #start { display: none; }
  #start.-delay { display: block; }
</style>
<script>
  function restart() {
    const url = new URL(window.location.href);
    url.searchParams.delete("delay");
    window.location.href = url.pathname + url.search;
  }
</script>
</head>
<body>
<div class="dialog opening"><div class="box">
  <div>{{ title }}</div>
  <button type="button" onclick="restart()" id="start">Start</button>
</div></div>
<div class="dialog ended"><div class="box">
  <div>Session ended.</div>
  <button type="button" onclick="restart()">Restart</button>
</div></div>
<div id="terminal" class="textual-terminal"
     data-session-websocket-url="{{ websocket }}" data-font-size="{{ font_size }}"></div>
</body>
</html>
"""
"""The board's page (a Jinja template)."""


def full_page(title: str, sessions: int, *, demo: bool) -> str:
    """What a tab beyond the board's sessions gets, in plain words."""
    each = (
        "each with its own demo story: the most this board serves at once "
        "(taskboard-tui --serve --demo --sessions N sets it)"
        if demo
        else "each a dashboard process of its own: the most this board serves at once"
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>{escape(title)} · the room is full</title>
<style>body {{ background: #0c181f; color: #f2f2f2; font-family: ui-monospace, Menlo,
monospace; max-width: 44em; margin: 4em auto; line-height: 1.5; }}</style></head>
<body>
<h1>The training room is full</h1>
<p>{sessions} browser sessions are open, {each}.</p>
<p>Reload this page once someone closes their tab, or follow along on a neighbour's
screen.</p>
</body>
</html>
"""
