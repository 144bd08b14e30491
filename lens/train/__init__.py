"""Training: LoRA fine-tuning of LENS models."""
