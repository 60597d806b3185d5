//! DistributedSampler: disjoint shards, PyTorch's padding and drop_last, reshuffling per
//! epoch, and use through DataLoader.

use ember_data::{DataLoader, Sampler, TensorDataset};
use ember_distributed::DistributedSampler;
use ember_tensor::{Result, Tensor};
use std::collections::HashSet;

fn shards(len: usize, ranks: usize, shuffle: bool, drop_last: bool, epoch: u64) -> Result<Vec<Vec<usize>>> {
    (0..ranks)
        .map(|r| {
            Ok(DistributedSampler::new(len, ranks, r)?.shuffle(shuffle).drop_last(drop_last).seed(5).indices(epoch))
        })
        .collect()
}

#[test]
fn shuffled_shards_cover_the_dataset_once_when_it_divides_evenly() -> Result<()> {
    let s = shards(12, 3, true, false, 0)?;
    let all: Vec<usize> = s.iter().flatten().copied().collect();
    assert_eq!(all.len(), 12);
    assert_eq!(all.iter().copied().collect::<HashSet<_>>().len(), 12);
    assert!(s.iter().all(|shard| shard.len() == 4));
    Ok(())
}

#[test]
fn padding_repeats_the_first_indices_like_pytorch() -> Result<()> {
    // PyTorch: DistributedSampler(range(5), num_replicas=4, rank=r, shuffle=False) gives
    // [0, 4], [1, 0], [2, 1], [3, 2] (padded with indices[:3]).
    assert_eq!(shards(5, 4, false, false, 0)?, vec![vec![0, 4], vec![1, 0], vec![2, 1], vec![3, 2]]);
    // Padding longer than the dataset repeats it: 2 samples over 5 ranks.
    assert_eq!(shards(2, 5, false, false, 0)?, vec![vec![0], vec![1], vec![0], vec![1], vec![0]]);
    let s = DistributedSampler::new(5, 4, 0)?;
    assert_eq!((s.num_samples(), s.total_size(), Sampler::len(&s)), (2, 8, 2));
    Ok(())
}

#[test]
fn drop_last_cuts_the_tail_like_pytorch() -> Result<()> {
    // PyTorch: 10 samples over 4 ranks with drop_last: num_samples = ceil((10 - 4) / 4) = 2.
    assert_eq!(shards(10, 4, false, true, 0)?, vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]);
    // 3 samples over 4 ranks: nothing left.
    assert!(shards(3, 4, false, true, 0)?.iter().all(Vec::is_empty));
    Ok(())
}

#[test]
fn epochs_reshuffle_the_same_way_on_every_rank_and_set_epoch_pins_one() -> Result<()> {
    let e0 = shards(100, 2, true, false, 0)?;
    let e1 = shards(100, 2, true, false, 1)?;
    assert_ne!(e0, e1);
    assert_eq!(e0, shards(100, 2, true, false, 0)?);
    for e in [&e0, &e1] {
        let both: HashSet<usize> = e.iter().flatten().copied().collect();
        assert_eq!(both.len(), 100, "the ranks' shards are disjoint");
    }
    let s = DistributedSampler::new(100, 2, 1)?.seed(5);
    s.set_epoch(1);
    assert_eq!(s.indices(7), e1[1], "set_epoch overrides the loader's epoch");
    Ok(())
}

#[test]
fn a_data_loader_walks_its_rank_shard_and_reshuffles_each_epoch() -> Result<()> {
    let loader = |rank| -> Result<DataLoader<TensorDataset>> {
        let ds = TensorDataset::new(vec![Tensor::arange(0, 10)?])?;
        DataLoader::builder(ds).batch_size(2).sampler(DistributedSampler::new(10, 2, rank)?).build()
    };
    let (l0, l1) = (loader(0)?, loader(1)?);
    assert_eq!(l0.len(), 3);
    let epoch = |l: &DataLoader<TensorDataset>| -> Result<Vec<i64>> {
        let mut seen = Vec::new();
        for batch in l {
            seen.extend(batch?[0].to_vec::<i64>()?);
        }
        Ok(seen)
    };
    let (a0, a1) = (epoch(&l0)?, epoch(&l1)?);
    let mut all: Vec<i64> = a0.iter().chain(&a1).copied().collect();
    all.sort();
    assert_eq!(all, (0..10).collect::<Vec<i64>>());
    assert_ne!(epoch(&l0)?, a0, "the second epoch has another order");
    let shuffled = DataLoader::builder(TensorDataset::new(vec![Tensor::arange(0, 4)?])?)
        .shuffle(true)
        .sampler(DistributedSampler::new(4, 2, 0)?)
        .build();
    assert!(shuffled.is_err(), "sampler and shuffle exclude each other");
    assert!(DistributedSampler::new(4, 2, 2).is_err());
    Ok(())
}
