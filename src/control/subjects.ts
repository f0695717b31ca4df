/** Subject names and KV keys of one job's control plane (all under the job's prefix). */
export interface ControlNames {
  register: string;
  heartbeat: string;
  report: string;
  status: string;
  member(id: string): string;
  bucket: string;
}

export function controlNames(job: string): ControlNames {
  const prefix = `laminar.${job}.ctl`;
  return {
    register: `${prefix}.register`,
    heartbeat: `${prefix}.heartbeat`,
    report: `${prefix}.report`,
    status: `${prefix}.status`,
    member: (id) => `${prefix}.member.${Buffer.from(id).toString('base64url')}`,
    bucket: `laminar_${job}`,
  };
}

export const Keys = {
  leader: 'leader',
  plan: 'plan',
  member: (id: string): string => `member.${Buffer.from(id).toString('base64url')}`,
  memberPrefix: 'member.',
  announce: (model: string): string => `version.${Buffer.from(model).toString('base64url')}`,
  announcePrefix: 'version.',
};
