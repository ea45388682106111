"""``python -m training.finetune CONFIG --paths.pairs TASK_PAIRS --paths.encoder MODEL [...]``

Fine-tuning on task data (paper §3.1) is the same trainer and loss on mention–name pairs from a
training corpus (e.g. NCBI-disease train mentions paired with the names of their gold concepts),
starting from a self-aligned encoder; only the config differs (``training/configs/finetune.cfg``).
"""
from .pretrain import app

if __name__ == "__main__":
    app()
