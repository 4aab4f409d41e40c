#!/usr/bin/env bash
# report_screenshot.sh: a PNG of report.html (or of one of its sections) in headless Chromium.
# usage: scripts/report_screenshot.sh REPORT_HTML OUT_PNG [SECTION_ID] [WIDTHxHEIGHT]
#   SECTION_ID (e.g. timeline, what-ran): show only that section (the page's own CSS, hiding the
#   rest); default: the top of the whole page. Size default 1280x1400.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n 2,5p "$0"
  exit 2
fi
html=$1
out=$2
section=${3:-}
size=${4:-1280x1400}
chromium=${FT_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[[ -n "$chromium" ]] || { echo "report_screenshot.sh: chromium not found (scripts/deps.sh core)" >&2; exit 1; }
[[ -f "$html" ]] || { echo "report_screenshot.sh: no file $html" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
page=$tmp/page.html
if [[ -n "$section" ]]; then
  [[ "$section" =~ ^[a-z-]+$ ]] || { echo "report_screenshot.sh: bad section id '$section'" >&2; exit 2; }
  grep -q "<section id=\"$section\">" "$html" || { echo "report_screenshot.sh: $html has no section '$section'" >&2; exit 1; }
  sed "s|</style>|header,main>*:not(#$section){display:none}</style>|" "$html" >"$page"
else
  cp "$html" "$page"
fi
HOME=$tmp XDG_CONFIG_HOME=$tmp XDG_CACHE_HOME=$tmp timeout -k 5 60 "$chromium" --headless=new \
  --no-sandbox --disable-gpu --no-first-run --disable-extensions --hide-scrollbars \
  --proxy-server=127.0.0.1:9 --virtual-time-budget=5000 --user-data-dir="$tmp/profile" \
  --window-size="${size/x/,}" --screenshot="$tmp/shot.png" "file://$page" >/dev/null 2>&1
[[ -s "$tmp/shot.png" ]] || { echo "report_screenshot.sh: chromium wrote no screenshot" >&2; exit 1; }
mv "$tmp/shot.png" "$out"
