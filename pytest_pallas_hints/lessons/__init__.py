"""What each chapter's tests know about its lesson, beyond the right answer.

A test file (``exercises/test_<chapter>.py``) is read by learners: it says what each
puzzle asks (the shapes, the right answer as a plain model, the checks it runs). What
it needs besides, to tell a wrong answer *why* it is wrong, lives here, one module per
chapter, where it is reviewed and tested on its own (``tests/lessons/``):

* models of known wrong answers (a kernel that forgets its mask, a recurrence read
  before its update), handed to ``check(..., likely=...)``;
* budgets of work and bytes (what a good schedule of the chapter's grids computes and
  moves), handed to ``check_work`` and ``check_traffic``;
* the chapter's own checks, which word a learner's sentence from what the kit
  measured (``fail(kind, says, facts)``).

``common`` holds what several chapters share. Nothing here reads JAX's internals: a
lesson asks the kit's public views (``Measured``, ``Program``, ``jaxcompat``'s view of
a program's control flow) and never an equation's parameters.
"""
