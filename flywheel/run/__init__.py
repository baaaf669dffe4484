"""The run that the stages share: its context (config, run directory, roster, prompt splits,
judge; opening and resuming a run; a stage's bookkeeping), the frozen records its stages leave
(``results``), summary.json (``summary``), the bandits as they stand (``selectors``) and what an
experiment tracker gets (``metrics``). The stages and the flow stand on it."""
