"""Experiments: the file format and its validation (:mod:`.spec`), the factors
(:mod:`.factors`), trials, keys and run order (:mod:`.design`), the duration
model (:mod:`.estimate`), the plan (:mod:`.plan`) and the runner (:mod:`.runner`)."""
