"""Tuned kernels and models in PyTorch: loading them (loader.py), exporting the best kernel
(exporter.py), and the torch.compile backend (backend.py, split_model.py, torch_region.py)."""
