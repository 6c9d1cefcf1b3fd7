"""DSpark (DeepSeek, arXiv 2607.05147): a DFlash block drafter plus a low-rank Markov head
that biases each block slot's logits by the token drafted at the slot before it, and a
confidence head that predicts each slot's acceptance (docs/dspark.md).

    checkpoint/   spec, the one reader (speculators' `dspark` and SpecForge's layouts), engine
                  rules per release, convert between the two, the writer, tiny fixtures
    model.py      DSparkDrafter: the DFlash module (methods/dflash/model.py) and the two heads
    decode.py     one backbone pass, then the Markov chain over the block's slots
    train.py      `train --method dspark`: the DFlash loop with the heads (warm start from a
                  DFlash drafter's backbone)
    measure.py    offline eval (DFlash's blocks, drafted through the Markov chain) and the
                  pass cost (the backbone pass + the chain)
"""
