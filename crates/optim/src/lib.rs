//! `ember-optim`: optimizers and learning-rate schedules (filled in by the training-stack issue).
