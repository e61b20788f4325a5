"""Integrations with other libraries: the Validator (validate.py) for data loaders, Hugging Face datasets
(hf.py), PyTorch (torch.py) and the scan on a Ray cluster (ray.py).

Empty on purpose: each module imports its library (numpy, torch, ray) only when it is itself imported."""
