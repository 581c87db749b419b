"""What the training commands (`hf_ffn.finetune`, `hf_ffn.mlm`, `hf_ffn.healing`) share: arguments, readers, the
MLM data path (`corpus`, `blocks`), collators and outputs."""
