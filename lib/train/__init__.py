"""The training step being measured: the GPT model, the step each stage's switches build (step), the
hand-written FP8 layers, and the plain nanoGPT-form loop the harness is checked against. Imports
lib.core and lib.results."""
