"""One package per draft method (core/registry.py lists them), split by layer.

    methods/<package>/checkpoint    detect, read the header, inspect fields, engine rules (the
                                    data in checkpoint/engines/), convert, write, fixtures
    methods/<package>/model         build the module
    methods/<package>/decode        propose drafts for the one lossless verifier
    methods/<package>/train         its options and training step
    methods/<package>/measure       offline eval, probe, the cost of a pass

A part (a module, or a package of modules) belongs to the layer it is named after, and imports
only that layer and those below it, as every module does (tests/test_layers.py). Generic code
reaches a part through `core.registry.part(name, layer)`, never by a method's name.
"""
