package main

// A line chart of the scale mode's lag samples, drawn with the standard
// image packages and x/image's fixed 7x13 font: seconds since the run's
// start across, records not yet committed up, one line per run.

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// lineColors are the runs' colours, in order.
var lineColors = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff},
}

// plot is a chart being drawn: the image and the data area's bounds in
// pixels and in data units.
type plot struct {
	img              *image.RGBA
	x0, y0, x1, y1   int // the data area, y0 at the top
	maxX, maxY       float64
	ticksX, ticksYAt []float64
}

func writeLagPlot(path, title string, runs []*scaleRun) error {
	const w, h = 960, 540
	p := &plot{img: image.NewRGBA(image.Rect(0, 0, w, h)), x0: 90, y0: 50, x1: w - 30, y1: h - 110}
	draw.Draw(p.img, p.img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	for _, r := range runs {
		for _, s := range r.lag {
			p.maxX = max(p.maxX, s.at)
			p.maxY = max(p.maxY, float64(s.lag))
		}
	}
	if p.maxX == 0 || p.maxY == 0 {
		return fmt.Errorf("no lag samples to plot")
	}
	p.maxX, p.ticksX = niceTicks(p.maxX)
	p.maxY, p.ticksYAt = niceTicks(p.maxY)
	p.axes(title)
	for i, r := range runs {
		c := lineColors[i%len(lineColors)]
		for j := 1; j < len(r.lag); j++ {
			a, b := r.lag[j-1], r.lag[j]
			p.line(p.px(a.at), p.py(float64(a.lag)), p.px(b.at), p.py(float64(b.lag)), c)
		}
		// The legend, under the chart.
		lx, ly := p.x0+(i%2)*420, p.y1+55+(i/2)*18
		for d := range 3 {
			p.line(lx, ly-4+d, lx+24, ly-4+d, c)
		}
		p.text(lx+32, ly, fmt.Sprintf("%s: %.1f s", r.name, r.elapsed.Seconds()), color.Black)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, p.img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// axes draws the frame, the grid, the tick labels and the titles.
func (p *plot) axes(title string) {
	grid, black := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}, color.RGBA{0, 0, 0, 0xff}
	for _, t := range p.ticksX {
		x := p.px(t)
		p.line(x, p.y0, x, p.y1, grid)
		label := fmt.Sprintf("%g", t)
		p.text(x-len(label)*7/2, p.y1+18, label, black)
	}
	for _, t := range p.ticksYAt {
		y := p.py(t)
		p.line(p.x0, y, p.x1, y, grid)
		label := humanCount(t)
		p.text(p.x0-8-len(label)*7, y+4, label, black)
	}
	p.line(p.x0, p.y0, p.x0, p.y1, black)
	p.line(p.x0, p.y1, p.x1, p.y1, black)
	p.text(p.x0, 18, title, black)
	p.text((p.x0+p.x1)/2-130, p.y1+36, "seconds since the start of the run", black)
	p.text(8, p.y0-12, "records not committed (lag)", black)
}

func (p *plot) px(x float64) int { return p.x0 + int(math.Round(x/p.maxX*float64(p.x1-p.x0))) }
func (p *plot) py(y float64) int { return p.y1 - int(math.Round(y/p.maxY*float64(p.y1-p.y0))) }

// line draws a 2-pixel line from (ax, ay) to (bx, by) (Bresenham).
func (p *plot) line(ax, ay, bx, by int, c color.RGBA) {
	dx, dy := abs(bx-ax), -abs(by-ay)
	sx, sy := sign(bx-ax), sign(by-ay)
	e := dx + dy
	for {
		p.img.SetRGBA(ax, ay, c)
		p.img.SetRGBA(ax, ay+1, c)
		if ax == bx && ay == by {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			ax += sx
		} else {
			e += dx
			ay += sy
		}
	}
}

func (p *plot) text(x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: p.img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// niceTicks rounds max up to a multiple of a 1-2-5 step giving about five
// ticks, and returns it with the ticks from 0.
func niceTicks(maxV float64) (float64, []float64) {
	raw := maxV / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	top := math.Ceil(maxV/step) * step
	var ticks []float64
	for t := 0.0; t <= top+step/2; t += step {
		ticks = append(ticks, t)
	}
	return top, ticks
}

// humanCount prints a count as 2.5M, 300k or 12.
func humanCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
