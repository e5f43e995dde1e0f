"""Pure TensorFlow privacy mechanisms: encode, noise, sparsify, clip; no TFF."""
