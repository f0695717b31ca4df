/**
 * Trajectory ids are a function of the claim: the group (prompt and epoch) and the sample index.
 * So a prompt claimed twice (an expired lease) names the same trajectories, and the partial
 * pool's exclusive start and the buffer's deduplication keep each sample produced once.
 */
export function trajectoryIdOf(groupId: string, sampleIndex: number): string {
  return `${groupId}/${sampleIndex}`;
}
