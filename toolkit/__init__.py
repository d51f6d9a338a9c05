"""ggml-vendor: pin ggml's GDN and flash-attention kernels and ship them as Hugging Face Hub kernels."""

__version__ = "0.1.0"
