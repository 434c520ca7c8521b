#!/bin/sh
# Generates configure and the Makefile templates from a git checkout.
# Needs autoconf, automake and libtool (apt-get install autoconf automake libtool).
set -e
cd "$(dirname "$0")"
autoreconf --install --force --warnings=all
