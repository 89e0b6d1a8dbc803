"""From a config and a checkpoint to a model, as mmdet's and mmseg's ``apis`` do: where a
config enters (:func:`read_config`, and the check of its ``type`` names,
:func:`unknown_types`) and the one loader of models (:func:`init_model`) and backbones
(:func:`init_backbone`) that the app, the attention maps, deploy and the analysis tools use.
"""
from .config import check_types, read_config, unknown_types
from .model import SCOPES, check_state, init_backbone, init_model

__all__ = ['read_config', 'unknown_types', 'check_types', 'init_model', 'init_backbone',
           'check_state', 'SCOPES']
