#!/bin/sh
# The example shell handler of the README demo (protocol: docs/handlers.md).
# Reads the job's args JSON on stdin, greets on stdout, reports a result on
# fd 3. Args containing "fail": true make it fail (exit 1), to show retries.
set -eu

args=$(cat)

echo "hello from job $AKADZE_JOB_ID (attempt $AKADZE_ATTEMPT of $AKADZE_MAX_ATTEMPTS, queue $AKADZE_QUEUE)"
sleep 0.2

case $args in
  *'"fail": true'* | *'"fail":true'*)
    echo "greet: asked to fail (args have \"fail\": true)" >&2
    exit 1
    ;;
esac

echo "job $AKADZE_JOB_ID greeted"
printf '{"result": {"greeted": true, "job": %s}}\n' "$AKADZE_JOB_ID" >&3
