"""Checks beyond the recipe's own: the checkpoints' safetensors headers (`weights`) and the configs
against failures the field keeps reporting (`field`). Neither imports torch."""
