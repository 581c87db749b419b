"""The switches study (README.md): its runners (`plot_activations`, `grad_norms`, `mlm_ln_demo`) and their code,
`activation_curves` (the activation panels) and `layer_norm_study` (Pre-LN vs Post-LN on real masked text)."""
