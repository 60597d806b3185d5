//! [`recurrent_module!`]: what the public cells and layers share around their core (a
//! `CellCore` or an `RnnCore`): the constructors, the sizes, `Module` and `Debug`.

/// Writes, for `recurrent_module!(LSTM: RnnCore, RnnOptions, mode |o| .., forward |s, x| ..)`
/// (`$Type { core: $Core }`, built with `$Options`):
///
/// - `new`, `with_options` and `from_params`, building the core for the recurrence
///   `$mode` (of the options `$o`);
/// - `input_size` and `hidden_size`;
/// - `Module`, with `$forward` (of `$s`, `$x`) and the core's parts;
/// - `Debug`, the core's repr.
macro_rules! recurrent_module {
    ($Type:ident: $Core:ident, $Options:ident, mode |$o:ident| $mode:expr, forward |$s:ident, $x:ident| $forward:expr) => {
        impl $Type {
            #[doc = concat!("With PyTorch's defaults (see [`", stringify!($Options), "`]), in `f32`.")]
            pub fn new(input_size: usize, hidden_size: usize) -> Result<$Type> {
                Self::with_options(input_size, hidden_size, $Options::default())
            }

            /// With the given options.
            pub fn with_options(input_size: usize, hidden_size: usize, options: $Options) -> Result<$Type> {
                let $o = &options;
                Ok($Type { core: build::new::<$Core>($mode, input_size, hidden_size, options.layer_options())? })
            }

            /// Over existing parameter `Var`s (shared with their other holders), named as in the
            /// state dict (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`, suffixed `_l0`,
            /// `_l0_reverse`, ... in a layer's): for computing gradients with respect to given
            /// `Var`s, or sharing weights. Every parameter the options imply must be there, with
            /// its shape and the options' dtype.
            pub fn from_params(
                input_size: usize,
                hidden_size: usize,
                options: $Options,
                params: Vec<(String, Var)>,
            ) -> Result<$Type> {
                let $o = &options;
                let options = options.layer_options();
                Ok($Type { core: build::from_params::<$Core>($mode, input_size, hidden_size, options, params)? })
            }

            /// The size of each input's features.
            pub fn input_size(&self) -> usize {
                self.core.input_size
            }

            /// The hidden size it was built with.
            pub fn hidden_size(&self) -> usize {
                self.core.hidden_size
            }
        }

        impl Module for $Type {
            /// The output alone, from zero states (for use in a
            /// [`Sequential`](crate::Sequential)).
            fn forward(&self, x: &Var) -> Result<Var> {
                let ($s, $x) = (self, x);
                $forward
            }

            fn children(&self) -> Parts<'_> {
                self.core.parts()
            }
        }

        impl fmt::Debug for $Type {
            /// PyTorch's repr: `LSTM(10, 20, num_layers=2)`, `GRUCell(10, 20)`.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.core.repr(f)
            }
        }
    };
}

pub(super) use recurrent_module;
