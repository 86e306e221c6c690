/* Too-large uploads: dcc.Upload drops files over max_size silently, so say so here, from the file's
   size, before anything is read. The limit comes from the zone's data-max-bytes attribute; the name is
   set as text (React escapes it). */
(function () {
  function check(files, zone) {
    const limit = Number(zone.getAttribute('data-max-bytes') || '0');
    if (!files || !limit) { return; }
    for (let i = 0; i < files.length; i++) {
      const f = files[i];
      if (f.size > limit) {
        const msg = f.name + ': file too large: ' + f.size.toLocaleString('en') + ' bytes, the limit is ' +
          limit.toLocaleString('en') + ' bytes';
        if (window.dash_clientside && window.dash_clientside.set_props) {
          window.dash_clientside.set_props('upload-message', {children: msg, className: 'upload-error'});
        }
      }
    }
  }
  function zoneOf(el) { return el && el.closest ? el.closest('#upload-zone') : null; }
  document.addEventListener('change', function (e) {
    const zone = zoneOf(e.target);
    if (zone) { check(e.target.files, zone); }
  }, true);
  document.addEventListener('drop', function (e) {
    const zone = zoneOf(e.target);
    if (zone && e.dataTransfer) { check(e.dataTransfer.files, zone); }
  }, true);
})();
