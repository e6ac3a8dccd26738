"""Speed of light: how far each bucket of a step is from what the GPU could do.

``model`` reads a model's shape from its config (on top of ``memory.model_shape``), ``work`` turns a step's
token counts into FLOPs and bytes per component and bucket, ``ceilings`` holds the GPUs' peak figures (spec
sheets in the GPU catalogue ``phaseprof/gpus.toml``, or a measured ``phaseprof ceilings`` file), ``analyze`` puts work, time and
ceilings together into the breakdown's optional ``sol`` section, ``project`` explains cross-GPU diffs.
"""
