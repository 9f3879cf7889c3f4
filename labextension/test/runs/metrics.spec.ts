import {
  defaultMetric,
  primaryMetric,
  splitMetrics,
  userFirst
} from '../../src/runs/metrics';

/** What MLflow gives, sorted: its system metrics land among the user's. */
const KEYS = [
  'accuracy',
  'system/cpu_utilization_percentage',
  'system/gpu_0_utilization_percentage',
  'train_loss',
  'val_loss'
];

describe("the user's metrics and the system ones", () => {
  it("put the user's first, each kind in its order", () => {
    expect(userFirst(KEYS)).toEqual([
      'accuracy',
      'train_loss',
      'val_loss',
      'system/cpu_utilization_percentage',
      'system/gpu_0_utilization_percentage'
    ]);
    expect(splitMetrics(KEYS).system).toHaveLength(2);
  });

  it("open a comparison on the user's loss, never on a system metric", () => {
    expect(defaultMetric(KEYS)).toBe('train_loss');
    expect(defaultMetric(['system/cpu_utilization_percentage', 'mae'])).toBe(
      'mae'
    );
  });

  it('fall back to a system metric only when the runs logged nothing else', () => {
    expect(defaultMetric(['system/memory_usage_megabytes'])).toBe(
      'system/memory_usage_megabytes'
    );
    expect(defaultMetric([])).toBeNull();
  });
});

describe("the table's primary metric", () => {
  it("is the user's first loss, else the user's first metric", () => {
    expect(primaryMetric(KEYS, null)).toBe('train_loss');
    expect(primaryMetric(['accuracy', 'mae'], null)).toBe('accuracy');
  });

  it('is the metric picked for comparison, when the page has it', () => {
    expect(primaryMetric(KEYS, 'accuracy')).toBe('accuracy');
    expect(primaryMetric(KEYS, 'bleu')).toBe('train_loss');
  });

  it('is none when the runs logged only system metrics', () => {
    expect(primaryMetric(['system/memory_usage_megabytes'], null)).toBeNull();
    expect(primaryMetric([], null)).toBeNull();
  });
});
