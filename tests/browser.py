"""Debian's chromium as the browser tests launch it (playwright with executable_path; no browser
download): headless, and with the background services off, whose connections this closed network
would refuse."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
