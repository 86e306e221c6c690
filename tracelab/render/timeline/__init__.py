"""The dashboard's timeline on the server side: rows, level-of-detail tiles, the stored overview and the encoding the canvas script (app/assets/timeline_canvas.js) draws."""
