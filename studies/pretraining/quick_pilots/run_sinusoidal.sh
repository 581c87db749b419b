#!/bin/bash
# run.sh with the position embeddings initialised as sinusoids (quick pilots D, E; POS_SCALE=3 for E).
MLM="python studies/pretraining/quick_pilots/sinusoidal_positions.py" exec "$(dirname "$0")/run.sh" "$@"
