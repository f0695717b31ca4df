/** The testbed handle lives in src/testing (the soak uses it too). */
export { createTestbed, type Testbed, type TestHost } from '../../src/testing/testbed.js';
export { claimBed, claimFixedBed, type BedClaim } from '../../src/testing/bed-claim.js';
