#!/bin/sh
# run.sh — how ctest starts every test: RP_SHARED_DIR (models and data) from the caller's environment when
# set, else ../shared beside the checkout (CMake passes it as RP_SHARED_DEFAULT). So
# `RP_SHARED_DIR=/some/dir ctest` runs the suite against another data dir, e.g. an empty one.
: "${RP_SHARED_DIR:=$RP_SHARED_DEFAULT}"
export RP_SHARED_DIR
exec "$@"
