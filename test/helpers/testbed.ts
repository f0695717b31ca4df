/** The testbed handle lives in src/testing (the soak uses it too). */
export { createTestbed, type Testbed, type TestHost } from '../../src/testing/testbed.js';
