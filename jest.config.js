// Unit tests of the labextension's models, formatting and buffers
// (labextension/test/*.spec.ts), in jsdom, compiled by ts-jest.
module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/labextension/test'],
  testMatch: ['**/*.spec.ts?(x)'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  }
};
