//! The task heads on [`BertModel`]: [`BertForMaskedLM`] (transformers' `cls.predictions`,
//! its decoder tied to the word embedding) and [`BertForSequenceClassification`] (the
//! pooler, dropout and `classifier`).

use super::activation::HiddenAct;
use super::config::BertConfig;
use super::model::{BertInput, BertModel, layer_norm};
use ember_autograd::Var;
use ember_nn::{Dropout, LayerNorm, Linear, Module};
use ember_tensor::{DType, Result, Tensor};

/// `dense`, the activation and `LayerNorm` before the MLM decoder
/// (`cls.predictions.transform`).
#[derive(Module)]
pub struct BertPredictionHeadTransform {
    dense: Linear,
    #[module(rename = "LayerNorm")]
    layer_norm: LayerNorm,
    #[module(skip)]
    act: HiddenAct,
}

impl BertPredictionHeadTransform {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.layer_norm.forward(&self.act.apply(&self.dense.forward(x)?))
    }
}

/// The MLM head's own parameters: the transform and the decoder's `bias`; the decoder's
/// weight is the word embedding's, which the model passes in.
#[derive(Module)]
pub struct BertLMPredictionHead {
    bias: Var,
    transform: BertPredictionHeadTransform,
}

impl BertLMPredictionHead {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.transform.forward(x)
    }

    /// Vocabulary logits of hidden states, through the tied decoder `word_embeddings`.
    fn logits(&self, hidden: &Var, word_embeddings: &Var) -> Result<Var> {
        self.transform.forward(hidden)?.linear(word_embeddings, Some(&self.bias))
    }
}

/// `cls`: holds `predictions`, as transformers' `BertOnlyMLMHead` does.
#[derive(Module)]
pub struct BertOnlyMLMHead {
    predictions: BertLMPredictionHead,
}

impl BertOnlyMLMHead {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.predictions.forward(x)
    }
}

/// BERT with the masked-language-model head, transformers' `BertForMaskedLM`: logits
/// `[batch, seq, vocab]` for every position. The decoder is the word embedding (tied, as
/// in the checkpoints), so training the head trains the embedding too.
#[derive(Module)]
pub struct BertForMaskedLM {
    bert: BertModel,
    cls: BertOnlyMLMHead,
}

impl BertForMaskedLM {
    /// A randomly initialised model of `config` (no pooler, as transformers builds it).
    pub fn new(config: &BertConfig) -> Result<BertForMaskedLM> {
        let bert = BertModel::new(config, false)?;
        let bias = Var::param(Tensor::zeros([config.vocab_size], DType::F32)?);
        let transform = BertPredictionHeadTransform {
            dense: Linear::new(config.hidden_size, config.hidden_size)?,
            layer_norm: layer_norm(config)?,
            act: config.activation()?,
        };
        Ok(BertForMaskedLM { bert, cls: BertOnlyMLMHead { predictions: BertLMPredictionHead { bias, transform } } })
    }

    /// The encoder.
    pub fn bert(&self) -> &BertModel {
        &self.bert
    }

    /// The logits of `input_ids` without a mask, as `Module::forward`.
    fn forward(&self, input_ids: &Var) -> Result<Var> {
        self.forward_with(&BertInput::new(input_ids.value()))
    }

    /// The MLM logits `[batch, seq, vocab_size]` of `input`.
    pub fn forward_with(&self, input: &BertInput) -> Result<Var> {
        let hidden = self.bert.forward_with(input)?.last_hidden_state;
        self.cls.predictions.logits(&hidden, self.bert.embeddings().word_embeddings().weight())
    }
}

/// BERT with a classifier on the pooled output, transformers'
/// `BertForSequenceClassification`: logits `[batch, num_labels]`.
#[derive(Module)]
pub struct BertForSequenceClassification {
    bert: BertModel,
    dropout: Dropout,
    classifier: Linear,
}

impl BertForSequenceClassification {
    /// A randomly initialised model of `config`, with `config.num_labels()` classes.
    pub fn new(config: &BertConfig) -> Result<BertForSequenceClassification> {
        Self::from_bert(BertModel::new(config, true)?, config.num_labels())
    }

    /// A new classifier of `num_labels` classes on a (pretrained) encoder, for
    /// fine-tuning: the way to start from a checkpoint without a classifier
    /// (`bert-base-uncased`). An encoder without a pooler gets a freshly initialised one.
    pub fn from_bert(bert: BertModel, num_labels: usize) -> Result<BertForSequenceClassification> {
        let config = bert.config();
        let p = config.classifier_dropout.unwrap_or(config.hidden_dropout_prob);
        let classifier = Linear::new(config.hidden_size, num_labels)?;
        let bert = bert.with_pooler()?;
        if bert.dtype() != DType::F32 {
            classifier.to_dtype(bert.dtype())?;
        }
        Ok(BertForSequenceClassification { dropout: Dropout::new(p)?, classifier, bert })
    }

    /// The encoder.
    pub fn bert(&self) -> &BertModel {
        &self.bert
    }

    /// The classifier, `hidden_size -> num_labels`.
    pub fn classifier(&self) -> &Linear {
        &self.classifier
    }

    /// The logits of `input_ids` without a mask, as `Module::forward`.
    fn forward(&self, input_ids: &Var) -> Result<Var> {
        self.forward_with(&BertInput::new(input_ids.value()))
    }

    /// The class logits `[batch, num_labels]` of `input`.
    pub fn forward_with(&self, input: &BertInput) -> Result<Var> {
        let out = self.bert.forward_with(input)?;
        let Some(pooled) = out.pooler_output else {
            return Err(ember_tensor::Error::invalid("BertForSequenceClassification", "the encoder has no pooler"));
        };
        self.classifier.forward(&self.dropout.forward(&pooled)?)
    }
}
