#!/usr/bin/env bash
# The browser of the app's browser test (tests/test_app.py): Debian's chromium, which the test
# drives headless through Playwright from .venv (`make setup` installs Playwright; no browser is
# ever downloaded by it). `make test` runs this first. Nothing to do where chromium is already
# installed; otherwise it installs Debian's package as root (CI, a container), or says what to run.
# INLINE_MM_BROWSER=skip leaves the browser out (the browser test then skips, saying why).
set -euo pipefail
log() { printf '[setup-browser %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

[[ "${INLINE_MM_BROWSER:-}" == skip ]] && exit 0
command -v chromium >/dev/null && exit 0
if ! command -v apt-get >/dev/null; then
    log "FAILED: the app's browser test needs Chromium (/usr/bin/chromium) and this is not a" \
        "Debian system: install Chromium, or run INLINE_MM_BROWSER=skip make test"
    exit 1
fi
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        log "FAILED: the app's browser test needs Debian's chromium: run" \
            "'sudo apt-get install chromium', or INLINE_MM_BROWSER=skip make test to leave it out"
        exit 1
    fi
fi
start=$SECONDS
log "installing Debian's chromium (once per machine; ~1-2 min)"
"${SUDO[@]}" apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q chromium >/dev/null
command -v chromium >/dev/null || { log "FAILED: chromium installed but not on PATH"; exit 1; }
log "$(chromium --version 2>/dev/null) installed in $(( SECONDS - start ))s"
