#!/usr/bin/env bash
# Build a private folder of the shared libraries and fonts WeasyPrint needs (Pango, HarfBuzz,
# fontconfig, GLib, DejaVu fonts), for GPU hosts whose image lacks them and that cannot install
# system packages. Debian bookworm builds: they run on glibc 2.36 or newer (Debian 12+, Ubuntu
# 23.04+). Nothing is installed system-wide: lib/report/export.py points only the PDF-rendering child
# process at this folder.
#   usage: tools/pdf_sysroot.sh DEST        (needs apt-get and a Debian/Ubuntu package source)
set -euo pipefail
dest=${1:?usage: tools/pdf_sysroot.sh DEST}
pkgs=(libglib2.0-0 libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz0b libharfbuzz-subset0 libfontconfig1
      libfreetype6 libfribidi0 libthai0 libthai-data libdatrie1 libgraphite2-3 libpng16-16 libbrotli1
      libpcre2-8-0 libffi8 libexpat1 fonts-dejavu-core)
debs=$(mktemp -d)
(cd "$debs" && apt-get download -q "${pkgs[@]}" >/dev/null 2>&1) || {
  echo "pdf_sysroot: apt-get download failed (run 'apt-get update' first?)" >&2; exit 1; }
rm -rf "$dest" && mkdir -p "$dest"
for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$dest"; done
rm -rf "$debs" "$dest/usr/share/doc" "$dest/usr/share/man" "$dest/usr/share/lintian" "$dest/usr/share/locale"
cat > "$dest/fonts.conf" <<CONF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir prefix="relative">usr/share/fonts</dir>
  <cachedir>/tmp/gpt2-levers-fontconfig</cachedir>
</fontconfig>
CONF
echo "pdf_sysroot: $(du -sh "$dest" | cut -f1) in $dest"
