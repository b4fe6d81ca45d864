"""The smallest registered model, the one most tests build: patch 2, 4x4 windows, 32 channels, 32x32 images."""

PICO = "swinlite_pico_patch2_window4_32"
