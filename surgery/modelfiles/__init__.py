"""Where a model's files are, however it was named: `source` (`ModelSource`, a local folder, the hub id
syntax) and `sidebyside` (independent reads of the draft's and the target's files at once). The hub's
own reader is surgery/hub; `surgery.facts.modelref.open_model` picks between them."""
