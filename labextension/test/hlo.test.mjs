// Checks of the HLO tokenizer and line facts (no DOM needed).
import assert from 'node:assert/strict';
import { tokens, lineFacts, passSnapshots } from '../lib/hlo.js';

const line =
  '  ROOT %add.7 = f32[100,100]{1,0} add(f32[100,100]{1,0} %multiply.6, f32[100,100]{1,0} %y), ' +
  'metadata={source_file="Cell In[1]" source_line=3}';
const toks = tokens(line);
const of = cls => toks.filter(([c]) => c === cls).map(([, t]) => t);
assert.deepEqual(of('keyword'), ['ROOT']);
assert.deepEqual(of('name'), ['%add.7', '%multiply.6', '%y']);
assert.deepEqual(of('opcode'), ['add']);
assert.deepEqual(of('type'), ['f32[100,100]{1,0}', 'f32[100,100]{1,0}', 'f32[100,100]{1,0}']);
assert.deepEqual(of('string'), ['"Cell In[1]"']);
assert.deepEqual(of('attr'), ['metadata', 'source_file', 'source_line']);
assert.deepEqual(of('number'), ['3']);
assert.equal(toks.map(([, t]) => t).join(''), line); // nothing lost, nothing added

const module = [
  'HloModule m',
  '',
  '%fused_reduce.16 (p: f32[4]) -> f32[] {',
  '  %p = f32[4]{0} parameter(0)',
  '  %m = f32[4]{0} multiply(f32[4]{0} %p, f32[4]{0} %p), metadata={source_file="c.py" source_line=2}',
  '}',
  '',
  'ENTRY %main (x: f32[4]) -> f32[] {',
  '  %x = f32[4]{0} parameter(0)',
  '  ROOT %reduce_fusion.20 = f32[] fusion(f32[4]{0} %x), kind=kInput, calls=%fused_reduce.16',
  '}'
];
const kernelOf = new Map([['reduce_fusion.20', 'reduce_fusion.20'], ['fused_reduce.16', 'reduce_fusion.20']]);
const facts = lineFacts(module.join('\n'), kernelOf);
assert.equal(facts[2].kernel, 'reduce_fusion.20');
assert.equal(facts[4].kernel, 'reduce_fusion.20');
assert.equal(facts[4].instruction, 'm');
assert.equal(facts[4].sourceLine, 2);
assert.equal(facts[4].sourceFile, 'c.py');
assert.equal(facts[8].kernel, null);
assert.equal(facts[9].kernel, 'reduce_fusion.20');
assert.equal(facts[9].instruction, 'reduce_fusion.20');

const passes = '// ---- after a (no change, 0.1 ms)\n// ---- after b (changed, 1 ms)\nHloModule x\nbody\n\n' +
  '// ---- after b (changed, 1 ms)\nHloModule y\n';
assert.deepEqual(passSnapshots(passes), [
  { name: 'b', text: 'HloModule x\nbody' },
  { name: 'b #2', text: 'HloModule y' }
]);
console.log('hlo: ok');
