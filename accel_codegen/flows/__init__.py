"""Flows: what runs example inputs through builds of the compiler. The build flow
(:mod:`.pipeline`: ``partition_for_accel`` and ``build``, with int8 calibration, GPTQ and
equalisation), the accuracy report (:mod:`.accuracy`) and the mixed-precision search
(:mod:`.mixed`). Above the compiler, below the tools: the compiler never imports a flow.
"""
