#!/usr/bin/env bash
# Gradescope's image set-up: a Python 3.11 or newer, with venv and git. The kit and
# JAX are installed afresh for every submission by grade.py, from the autograder's
# own source.
set -euo pipefail
apt-get update -q
apt-get install -yq python3 python3-venv python3-pip git
