"""A GRPO trainer step with megatron.core, fed by Vime sample batches and writing slime-format dumps."""
