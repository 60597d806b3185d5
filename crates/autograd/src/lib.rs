//! `ember-autograd`: `Var`, the graph, and the backward engine (filled in by the autograd issue).
