"""The steps of a run's turn, one module each, in the order driver/loop.py takes them: the model's
turn (model_turn), the calls it proposed (decisions), and what a decision leads to: a call
executed (execution), a plan or a proposal (proposals), a child run (delegation, children), a
refusal, an approval asked for or a halt (verdicts), the final report verified (final), and a run
paused or ended (ends). Each step is a function of the Driver and the run as last committed."""
